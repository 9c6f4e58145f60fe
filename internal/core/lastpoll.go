package core

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/watukuy/watukuy/watukuytype"
)

// pollSummaryV1 starts the compact form of a PollSummary: its version.
const pollSummaryV1 = "1;"

// pollSummaryFlags are the letters of the compact form's flags, in PollSummary's order.
const pollSummaryFlags = "tnrbf"

// compactPoll is p's compact form, as the state hash keeps it:
// "1;atMs;durationMs;pages;items;events;delivered;parked;invalid;deleteCandidates;flags;outcome",
// flags being the letters t (truncated), n (not modified), r (reconciled), b (backfill
// pending), f (fresh) of those set; the outcome comes last, so it may hold any character. At is kept to
// the millisecond. A count of 0 is written as nothing (every idle key keeps one of these).
func compactPoll(p watukuytype.PollSummary) string {
	at := ""
	if t, err := time.Parse(time.RFC3339Nano, p.At); err == nil {
		at = strconv.FormatInt(t.UnixMilli(), 10)
	}
	var flags []byte
	for i, on := range []bool{p.Truncated, p.NotModified, p.Reconciled, p.BackfillPending, p.Fresh} {
		if on {
			flags = append(flags, pollSummaryFlags[i])
		}
	}
	var b strings.Builder
	b.WriteString(pollSummaryV1 + at)
	for _, n := range []int64{p.DurationMs, int64(p.Pages), int64(p.Items), int64(p.Events), int64(p.Delivered), int64(p.Parked),
		int64(p.Invalid), int64(p.DeleteCandidates)} {
		b.WriteByte(';')
		if n != 0 {
			b.WriteString(strconv.FormatInt(n, 10))
		}
	}
	b.WriteString(";" + string(flags) + ";" + p.Outcome)
	return b.String()
}

// parsePoll reads a state hash's lastPoll (compactPoll).
func parsePoll(v string) (watukuytype.PollSummary, error) {
	var p watukuytype.PollSummary
	rest, ok := strings.CutPrefix(v, pollSummaryV1)
	f := strings.SplitN(rest, ";", 11)
	if !ok || len(f) != 11 {
		return p, fmt.Errorf("watukuy: lastPoll %q is not a poll summary", v)
	}
	if f[0] != "" {
		ms, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return p, fmt.Errorf("watukuy: lastPoll %q: at: %w", v, err)
		}
		p.At = time.UnixMilli(ms).UTC().Format(time.RFC3339Nano)
	}
	if p.DurationMs, ok = parseInt64(f[1]); !ok {
		return p, fmt.Errorf("watukuy: lastPoll %q: durationMs %q is not a number", v, f[1])
	}
	for i, dst := range []*int{&p.Pages, &p.Items, &p.Events, &p.Delivered, &p.Parked, &p.Invalid, &p.DeleteCandidates} {
		n, ok := parseInt64(f[2+i])
		if !ok {
			return p, fmt.Errorf("watukuy: lastPoll %q: field %d (%q) is not a number", v, 3+i, f[2+i])
		}
		*dst = int(n)
	}
	for _, c := range f[9] {
		switch c {
		case 't':
			p.Truncated = true
		case 'n':
			p.NotModified = true
		case 'r':
			p.Reconciled = true
		case 'b':
			p.BackfillPending = true
		case 'f':
			p.Fresh = true
		default:
			return p, fmt.Errorf("watukuy: lastPoll %q: unknown flag %q", v, c)
		}
	}
	p.Outcome = f[10]
	return p, nil
}

// parseInt64 reads a compact form's count: "" is 0.
func parseInt64(s string) (int64, bool) {
	if s == "" {
		return 0, true
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

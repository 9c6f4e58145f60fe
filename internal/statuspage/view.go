package statuspage

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/watukuy/watukuy/admintoken"
	"github.com/watukuy/watukuy/internal/humantime"
	"github.com/watukuy/watukuy/watukuytype"
)

// page is what every template gets; each page fills its own part. The values are computed
// here rather than in the templates, so the templates only place them.
type page struct {
	Title          string
	Who            *admintoken.Token
	ReadOnly       bool
	MonitoringPath string
	Generated      string
	// Stopped: the engine of the process that serves the page was stopped; it runs nothing.
	Stopped bool

	// The login form.
	Off   bool // no token is configured: nobody can log in
	Error string
	Next  string

	// A message page (not found, refused, Redis unavailable).
	Message string

	// The keys' table: one page of it, and the number of scheduled keys (registered and not
	// deleted) of the poller, or of every poller.
	Poller              string
	Rows                []keyRow
	Summary             []statusCount
	Scheduled           int64
	Later               bool // a page after the first
	NextPage, FirstPage string

	// One key.
	Key      *keyDetail
	NotFound *notFoundView
}

// keyRow is one key as the table shows it.
type keyRow struct {
	Poller, Partition string // Partition is "-" for an unpartitioned poller, as the CLI shows it
	PollerHref        string // the table of the poller's keys
	Href              string // the key's detail page
	API               string // the key's path in the admin API, e.g. /api/keys/orders/-
	Status, StatusCls string
	Paused            bool
	Fresh, FreshTitle string
	Lag               string
	NextDue, NextDueT string
	Circuit, CircCls  string
	Throttled, ThrT   string
	Outbox            int64
	OutboxOldest      string
	OutboxCls         string
	Parked            int64
	ParkedTitle       string
	ErrCode, ErrMsg   string
	ErrTitle          string
}

// statusCount is how many keys of the table have one status.
type statusCount struct {
	Status, Cls string
	N           int
}

// field is one name and value of a detail page's section; Title is shown on hover (the
// exact time behind a relative one).
type field struct {
	Name, Value, Title string
	Pre                bool // a JSON value: shown preformatted
}

// section is a titled list of fields.
type section struct {
	Title  string
	Fields []field
}

// keyDetail is one key's page.
type keyDetail struct {
	Row      keyRow
	Sections []section
	// Backfill is the backfill's fraction done (0..1), when the poller places cursors.
	BackfillFraction string // "" when the poller cannot place cursors
	BackfillPercent  string
	Parked           []parkedRow
	ParkedTotal      int64  // the key's parked rows, of which Parked is one page
	ParkedNext       string // the page of the rows after Parked, "" when none
	ParkedFirst      string // the page of the first rows, "" on it
	RetryAll         string // the JSON bodies of the "all" buttons
	DiscardAll       string
}

// parkedRow is one parked row of a key.
type parkedRow struct {
	ID, Kind, Error       string
	Errors                []string
	Stack                 string // of the failure that parked it, if it carried one
	Attempts              int
	ParkedAt, ParkedAtT   string
	OrderingKey, Identity string
	What, JSON            string // "event" or "item", and its JSON, indented
	RetryBody             string
	DiscardBody           string
}

// notFoundView names what does not exist and what does.
type notFoundView struct {
	Message string
	What    string // "pollers" or "partitions of orders"
	Known   []link
}

type link struct{ Label, Href string }

// statusOrder is the order the summary counts statuses in: trouble first.
func statusOrder() []watukuytype.Status {
	return []watukuytype.Status{watukuytype.StatusCircuitOpen, watukuytype.StatusFailing, watukuytype.StatusBlocked, watukuytype.StatusDegraded,
		watukuytype.StatusThrottled, watukuytype.StatusPaused, watukuytype.StatusRemoved, watukuytype.StatusDeleted,
		watukuytype.StatusRunning, watukuytype.StatusIdle}
}

// statusClass is the CSS class of a status: bad (failing), warn (held back), muted
// (stopped on purpose), info (running), ok (idle).
func statusClass(s watukuytype.Status) string {
	switch s {
	case watukuytype.StatusCircuitOpen, watukuytype.StatusFailing, watukuytype.StatusBlocked:
		return "bad"
	case watukuytype.StatusDegraded, watukuytype.StatusThrottled:
		return "warn"
	case watukuytype.StatusPaused, watukuytype.StatusRemoved, watukuytype.StatusDeleted:
		return "muted"
	case watukuytype.StatusRunning:
		return "info"
	}
	return "ok"
}

func summarize(kis []watukuytype.KeyInfo) []statusCount {
	n := map[watukuytype.Status]int{}
	for _, ki := range kis {
		n[ki.Status]++
	}
	var out []statusCount
	for _, s := range statusOrder() {
		if n[s] > 0 {
			out = append(out, statusCount{Status: string(s), Cls: statusClass(s), N: n[s]})
			delete(n, s)
		}
	}
	rest := make([]string, 0, len(n)) // a status this build does not know yet
	for s := range n {
		rest = append(rest, string(s))
	}
	sort.Strings(rest)
	for _, s := range rest {
		out = append(out, statusCount{Status: s, Cls: "ok", N: n[watukuytype.Status(s)]})
	}
	return out
}

// partLabel shows an unpartitioned poller's partition as "-", as paths and the CLI do.
func partLabel(partition string) string {
	if partition == "" {
		return "-"
	}
	return partition
}

// keyPath is the path of a key below root: root/{poller}/{partition}, each segment escaped
// (the API's paths are unescaped segment by segment, as encodeURIComponent writes them).
func keyPath(root, poller, partition string) string {
	return root + "/" + url.PathEscape(poller) + "/" + url.PathEscape(partLabel(partition))
}

// pageURL is the table's page of poller after the cursor after ("" the first page).
func pageURL(poller, after string) string {
	q := url.Values{}
	if poller != "" {
		q.Set("poller", poller)
	}
	if after != "" {
		q.Set("after", after)
	}
	if len(q) == 0 {
		return Root
	}
	return Root + "?" + q.Encode()
}

func ms(n int64) string { return humantime.Round(time.Duration(n) * time.Millisecond).String() }

// when renders an optional time as relative text and its exact UTC time (for the title).
func when(t *time.Time, now time.Time) (string, string) {
	if t == nil || t.IsZero() {
		return "", ""
	}
	return humantime.Relative(*t, now), t.UTC().Format(time.RFC3339Nano)
}

func lastError(ki watukuytype.KeyInfo) (watukuytype.LastError, bool) {
	var le watukuytype.LastError
	return le, len(ki.LastError) > 0 && json.Unmarshal(ki.LastError, &le) == nil
}

// clip shortens s to n runes for a table cell; the whole text goes in the title.
func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

func newKeyRow(ki watukuytype.KeyInfo, now time.Time) keyRow {
	r := keyRow{Poller: ki.Poller, Partition: partLabel(ki.Partition),
		PollerHref: pageURL(ki.Poller, ""), Href: keyPath(Root+"/keys", ki.Poller, ki.Partition), API: keyPath(APIRoot+"/keys", ki.Poller, ki.Partition),
		Status: string(ki.Status), StatusCls: statusClass(ki.Status), Paused: ki.Paused,
		Lag: ms(ki.LagMs), Circuit: string(ki.Circuit), Outbox: ki.OutboxPending, Parked: ki.Parked}
	if r.Circuit == "" {
		r.Circuit = string(watukuytype.CircuitClosed)
	}
	if ki.Circuit == watukuytype.CircuitOpen {
		r.CircCls = "bad"
	}
	if ki.FreshAt == nil || ki.FreshnessMs < 0 {
		r.Fresh, r.FreshTitle = "never", "no cycle has found the key current with its API yet"
	} else {
		r.Fresh, r.FreshTitle = ms(ki.FreshnessMs), "fresh at "+ki.FreshAt.UTC().Format(time.RFC3339Nano)
	}
	r.NextDue, r.NextDueT = when(ki.NextDueAt, now)
	if ki.ThrottledUntil != nil && ki.ThrottledUntil.After(now) {
		r.Throttled, r.ThrT = when(ki.ThrottledUntil, now)
	}
	if ki.OutboxOldestAt != nil {
		r.OutboxOldest = ms(ki.OutboxOldestAgeMs)
		if ki.OutboxOldestAgeMs > time.Minute.Milliseconds() {
			r.OutboxCls = "warn"
		}
	}
	r.ParkedTitle = fmt.Sprintf("poison %d, invalid %d", ki.ParkedPoison, ki.ParkedInvalid)
	if le, ok := lastError(ki); ok {
		r.ErrCode, r.ErrMsg = string(le.Code), clip(le.Message, 140)
		r.ErrTitle = fmt.Sprintf("%s (%s) at %s: %s", le.Code, le.Phase, le.At, le.Message)
	} else if len(ki.LastError) > 0 {
		r.ErrCode, r.ErrMsg, r.ErrTitle = "?", clip(string(ki.LastError), 140), string(ki.LastError)
	} else if b := ki.Blocked; b != nil {
		r.ErrTitle = blockedText(b)
		r.ErrCode, r.ErrMsg = "BLOCKED", clip(r.ErrTitle, 140)
	}
	return r
}

// blockedText says why and since when a key's delivery is blocked.
func blockedText(b *watukuytype.DeliveryBlocked) string {
	return fmt.Sprintf("delivery blocked since %s: %s (%d tries, next at %s)", b.Since.UTC().Format(time.RFC3339), b.Error, b.Tries, b.NextTry.UTC().Format(time.RFC3339))
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

// timeField is a field holding an optional time: relative, exact on hover.
func timeField(name string, t *time.Time, now time.Time) field {
	v, title := when(t, now)
	if v != "" {
		v += " (" + title + ")"
	}
	return field{Name: name, Value: v, Title: title}
}

// indentJSON indents raw for a <pre>; what is not JSON is shown as it is.
func indentJSON(raw []byte) string {
	var b bytes.Buffer
	if json.Indent(&b, raw, "", "  ") != nil {
		return string(raw)
	}
	return b.String()
}

// unquoteJSON unwraps an invalid item, which the engine keeps as the API sent it (a JSON
// string holding the item's text, since it may not even be JSON).
func unquoteJSON(raw []byte) []byte {
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return raw
	}
	return []byte(s)
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only maps and slices of strings are marshaled here
	}
	return string(b)
}

func newKeyDetail(ki watukuytype.KeyInfo, parked []watukuytype.ParkedInfo, now time.Time) *keyDetail {
	d := &keyDetail{Row: newKeyRow(ki, now), ParkedTotal: max(ki.Parked, int64(len(parked))),
		RetryAll: mustJSON(map[string]any{"all": true}), DiscardAll: mustJSON(map[string]any{"all": true})}

	status := section{Title: "Status", Fields: []field{{Name: "status", Value: string(ki.Status)}, {Name: "paused", Value: yesNo(ki.Paused)},
		{Name: "source", Value: ki.Source}, {Name: "shadow", Value: yesNo(ki.Shadow)}}}
	if ki.Shadow || len(ki.ShadowEvents) > 0 {
		status.Fields = append(status.Fields, field{Name: "shadow events", Value: fmt.Sprintf("created %d, updated %d, deleted %d (would have been delivered)",
			ki.ShadowEvents["created"], ki.ShadowEvents["updated"], ki.ShadowEvents["deleted"])})
	}
	d.Sections = append(d.Sections, status)

	cursors := section{Title: "Cursors"}
	lanes := make([]string, 0, len(ki.Cursors))
	for l := range ki.Cursors {
		lanes = append(lanes, l)
	}
	sort.Strings(lanes)
	for _, l := range lanes {
		cursors.Fields = append(cursors.Fields, field{Name: l, Value: ki.Cursors[l], Pre: true})
	}
	if len(ki.CursorFormats) > 0 {
		cursors.Fields = append(cursors.Fields, field{Name: "formats", Value: strings.Join(ki.CursorFormats, ", ")})
	}
	d.Sections = append(d.Sections, cursors)

	d.Sections = append(d.Sections, section{Title: "Lease", Fields: []field{{Name: "owner", Value: ki.LeaseOwner},
		{Name: "epoch", Value: strconv.FormatInt(ki.LeaseEpoch, 10)}, timeField("expires", ki.LeaseExpires, now)}})

	sched := section{Title: "Schedule", Fields: []field{timeField("next due", ki.NextDueAt, now), {Name: "interval", Value: ki.Interval.String()},
		{Name: "circuit", Value: d.Row.Circuit}, {Name: "consecutive failures", Value: strconv.Itoa(ki.Failures)},
		timeField("throttled until", ki.ThrottledUntil, now), timeField("reconcile due", ki.ReconcileDue, now)}}
	if len(ki.RateLimit) > 0 {
		sched.Fields = append(sched.Fields, field{Name: "rate limit", Value: indentJSON(ki.RateLimit), Pre: true})
	}
	d.Sections = append(d.Sections, sched)

	dl := section{Title: "Delivery", Fields: []field{{Name: "blocked", Value: "no"}, {Name: "retrying", Value: strconv.FormatInt(ki.Retrying, 10) + " ordering keys"},
		timeField("next retry", ki.NextRetryAt, now)}}
	if ki.Blocked != nil {
		dl.Fields[0].Value = blockedText(ki.Blocked)
	}
	d.Sections = append(d.Sections, dl)

	last := section{Title: "Last poll and error"}
	var lp watukuytype.PollSummary
	if len(ki.LastPoll) > 0 && json.Unmarshal(ki.LastPoll, &lp) == nil {
		var flags []string
		for _, f := range []struct {
			on   bool
			name string
		}{{lp.Truncated, "truncated"}, {lp.NotModified, "not modified"}, {lp.Reconciled, "reconciled"}, {lp.BackfillPending, "backfill pending"}, {lp.Fresh, "fresh"}} {
			if f.on {
				flags = append(flags, f.name)
			}
		}
		v := fmt.Sprintf("%s in %dms: %s, %s, %s, %d delivered, %d parked, %d invalid", lp.Outcome, lp.DurationMs,
			plural(lp.Pages, "page"), plural(lp.Items, "item"), plural(lp.Events, "event"), lp.Delivered, lp.Parked, lp.Invalid)
		if lp.DeleteCandidates > 0 {
			v += fmt.Sprintf(", %d delete candidates", lp.DeleteCandidates)
		}
		if len(flags) > 0 {
			v += " (" + strings.Join(flags, ", ") + ")"
		}
		var at *time.Time
		if t, err := time.Parse(time.RFC3339Nano, lp.At); err == nil {
			at = &t
		}
		last.Fields = append(last.Fields, timeField("last poll at", at, now), field{Name: "last poll", Value: v})
	} else {
		last.Fields = append(last.Fields, field{Name: "last poll", Value: string(ki.LastPoll)})
	}
	if le, ok := lastError(ki); ok {
		last.Fields = append(last.Fields, field{Name: "last error", Value: fmt.Sprintf("%s (%s) at %s: %s", le.Code, le.Phase, le.At, le.Message)})
	} else {
		last.Fields = append(last.Fields, field{Name: "last error", Value: string(ki.LastError)})
	}
	d.Sections = append(d.Sections, last)

	counters := section{Title: "Counters", Fields: []field{{Name: "lag", Value: d.Row.Lag},
		{Name: "freshness", Value: d.Row.Fresh, Title: d.Row.FreshTitle}, timeField("fresh at", ki.FreshAt, now),
		{Name: "outbox pending", Value: strconv.FormatInt(ki.OutboxPending, 10)}}}
	if ki.OutboxOldestAt != nil {
		counters.Fields = append(counters.Fields, field{Name: "outbox oldest", Value: ms(ki.OutboxOldestAgeMs) + " old (" + ki.OutboxOldestAt.UTC().Format(time.RFC3339) + ")"})
	}
	counters.Fields = append(counters.Fields,
		field{Name: "parked", Value: fmt.Sprintf("%d (poison %d, invalid %d)", ki.Parked, ki.ParkedPoison, ki.ParkedInvalid)},
		field{Name: "held", Value: strconv.FormatInt(ki.Held, 10)}, field{Name: "items", Value: strconv.FormatInt(ki.Items, 10)},
		field{Name: "schema version", Value: strconv.Itoa(ki.SchemaVersion)})
	if ki.LogRetention > 0 {
		counters.Fields = append(counters.Fields, field{Name: "log retention", Value: ki.LogRetention.String()})
	} else {
		counters.Fields = append(counters.Fields, field{Name: "log retention", Value: "none (no replay)"})
	}
	d.Sections = append(d.Sections, counters)

	bf := section{Title: "Backfill"}
	if bp := ki.Backfill; bp != nil {
		state := "running"
		switch {
		case bp.Done:
			state = "done"
		case bp.Failed:
			state = "failed"
		case bp.LastError != "":
			state = "running (last request failed; retried at the next cycle)"
		}
		bf.Fields = []field{{Name: "state", Value: state}, {Name: "generation", Value: strconv.FormatInt(bp.Generation, 10)},
			{Name: "from", Value: bp.From, Pre: true}, {Name: "to", Value: bp.To, Pre: true}, {Name: "cursor", Value: bp.Cursor, Pre: true},
			{Name: "force", Value: yesNo(bp.Force)},
			{Name: "progress", Value: fmt.Sprintf("%s, %s, %s", plural(bp.Pages, "page"), plural(bp.Items, "item"), plural(bp.Events, "event"))},
			timeField("started", &bp.StartedAt, now), timeField("updated", &bp.UpdatedAt, now), timeField("done", bp.DoneAt, now),
			{Name: "last error", Value: bp.LastError}}
		if bp.Fraction != nil {
			f := min(max(*bp.Fraction, 0), 1)
			d.BackfillFraction = strconv.FormatFloat(f, 'f', 3, 64)
			d.BackfillPercent = strconv.FormatFloat(f*100, 'f', 0, 64) + "%"
		}
	} else {
		bf.Fields = []field{{Name: "state", Value: "none started"}}
	}
	d.Sections = append(d.Sections, bf)

	for _, p := range parked {
		row := parkedRow{ID: p.ID, Kind: p.Kind, Error: p.Error, Errors: p.Errors, Stack: p.Stack, Attempts: p.Attempts,
			OrderingKey: p.OrderingKey, Identity: p.Identity,
			RetryBody: mustJSON(map[string][]string{"ids": {p.ID}}), DiscardBody: mustJSON(map[string][]string{"ids": {p.ID}})}
		row.ParkedAt, row.ParkedAtT = when(&p.ParkedAt, now)
		switch {
		case len(p.Event) > 0:
			row.What, row.JSON = "event", indentJSON(p.Event)
		case len(p.Item) > 0:
			row.What, row.JSON = "item", indentJSON(unquoteJSON(p.Item))
		}
		d.Parked = append(d.Parked, row)
	}
	return d
}

func newNotFound(nf *watukuytype.NotFoundError) *notFoundView {
	v := &notFoundView{Message: nf.Error()}
	if nf.PartitionMissing {
		v.What = "partitions of " + nf.Poller
		for _, k := range nf.Known {
			v.Known = append(v.Known, link{Label: partLabel(k), Href: keyPath(Root+"/keys", nf.Poller, k)})
		}
		return v
	}
	v.What = "pollers"
	for _, k := range nf.Known {
		v.Known = append(v.Known, link{Label: k, Href: pageURL(k, "")})
	}
	return v
}

package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/watukuy/watukuy"
	"github.com/watukuy/watukuy/internal/admin"
	"github.com/watukuy/watukuy/internal/command"
	"github.com/watukuy/watukuy/watukuytype"
)

// parkedRow is a parked row with its key, for listings across partitions.
type parkedRow struct {
	Poller    string `json:"poller"`
	Partition string `json:"partition"`
	watukuytype.ParkedInfo
}

func parkedCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "parked",
		Short: "List, retry and discard parked rows (poison events and invalid items)",
		Long: `A poison event is one its handler kept failing: it is parked and holds the later events of
its ordering key (G4) until it is retried or discarded. An invalid item failed identity,
fingerprint or validation and was parked with its raw JSON.`,
		Args: cobra.NoArgs,
		RunE: needSubcommand,
	}
	cmd.AddCommand(parkedLsCmd(),
		parkedReleaseCmd("retry", "Return parked rows to work: poison events to delivery (held events follow in order), invalid items to the checks",
			"retried", "back to delivery in their original order; the next cycle delivers them", watukuy.Parked.Retry),
		parkedReleaseCmd("discard", "Drop parked rows; the events a poison event held go back to delivery",
			"discarded", "gone; the events they held go back to delivery", watukuy.Parked.Discard))
	return cmd
}

func parkedLsCmd() *cobra.Command {
	o := &op{}
	var kind, after string
	var limit int
	return o.command(opSpec{
		use:   "ls [--poller P [--partition X]] [--kind poison|invalid] [--limit N] [--after CURSOR]",
		short: "List parked rows: a table, then each row's error history, event or item, and held ordering key",
		long: `ls lists the parked rows of every poller, by poller, partition and id, a page of at most
--limit rows (default and most 1000) at a time, as GET /api/parked pages them: when more follow,
the last line says how to get them (more: watukuy parked ls ... --after CURSOR; with --json it
goes to stderr). With --poller it lists the rows of every partition of that poller, oldest
first (--limit N shows the first N). With --partition too it lists one key's rows by id (poison
events, then invalid items), a page at a time as above.`,
		keys: anyKeys,
		flags: func(fs *pflag.FlagSet) {
			fs.StringVar(&kind, "kind", "", "only rows of this kind: poison or invalid")
			fs.IntVar(&limit, "limit", 0, "show at most N rows (0: all; without --poller or with --partition, a page of 1 to 1000 rows, default 1000)")
			fs.StringVar(&after, "after", "", "without --poller or with --partition: the rows after this cursor, as the more: line of the page before gives it")
		},
		check: func(cmd *cobra.Command) error {
			paged := o.partitionGiven || o.poller == ""
			switch {
			case kind != "" && kind != "poison" && kind != "invalid":
				return command.Usagef("--kind %q: want poison or invalid", kind)
			case limit < 0:
				return command.Usagef("--limit %d must not be negative", limit)
			case paged && limit > maxPage:
				return command.Usagef("--limit %d: a page of parked rows holds at most %d", limit, maxPage)
			case after != "" && !paged:
				return command.Usagef("--after pages one partition's rows, or every poller's: pass --partition too, or drop --poller")
			}
			return nil
		},
		run: func(ctx context.Context, eng *watukuy.Engine) error {
			if o.poller == "" {
				return o.parkedAcross(ctx, eng, kind, after, limit)
			}
			if o.partitionGiven {
				return o.parkedPage(ctx, eng, kind, after, limit)
			}
			keys, err := o.keys(ctx, eng)
			if err != nil {
				return err
			}
			if keys, err = withParked(ctx, eng, keys); err != nil {
				return err
			}
			rows := []parkedRow{}
			for _, k := range keys {
				ps, err := eng.Parked().List(ctx, k, kind)
				if err != nil {
					return err
				}
				for _, p := range ps {
					rows = append(rows, parkedRow{k.Poller, k.Partition, p})
				}
			}
			sort.SliceStable(rows, func(i, j int) bool { return rows[i].ParkedAt.Before(rows[j].ParkedAt) })
			all := len(rows)
			if limit > 0 && len(rows) > limit {
				rows = rows[:limit]
			}
			if o.asJSON {
				return writeJSON(o.out, rows)
			}
			return o.printParked(rows, all, "")
		},
	})
}

// parkedAcross lists one page of every poller's parked rows of kind after the cursor after,
// as GET /api/parked does (admin.ParkedAcross): at most limit (maxPage when 0), and when more
// follow the command line of the next page.
func (o *op) parkedAcross(ctx context.Context, eng *watukuy.Engine, kind, after string, limit int) error {
	if limit == 0 {
		limit = maxPage
	}
	from, err := admin.ParseParkedCursor(after, "")
	if err != nil {
		return command.Usagef("--after %v", err)
	}
	found, next, err := admin.ParkedAcross(ctx, eng, "", kind, from, limit)
	if err != nil {
		return err
	}
	more := ""
	if next != "" {
		more = "more: " + moreCommand("parked ls", next, [2]string{"kind", kind}, [2]string{"limit", limitFlag(limit, maxPage)})
	}
	rows := make([]parkedRow, len(found))
	for i, r := range found {
		rows[i] = parkedRow{r.Poller, r.Partition, r.ParkedInfo}
	}
	return o.showPage(rows, more)
}

// parkedPage lists one page of --partition's parked rows of kind after the id after: at most
// limit (maxPage when 0), and when more follow the command line of the next page.
func (o *op) parkedPage(ctx context.Context, eng *watukuy.Engine, kind, after string, limit int) error {
	if limit == 0 {
		limit = maxPage
	}
	// One row more than the page says whether another page has any.
	ps, _, err := eng.Parked().Page(ctx, watukuytype.Key{Poller: o.poller, Partition: o.partition}, kind, after, min(limit+1, maxPage))
	if err != nil {
		return err
	}
	more := ""
	if len(ps) > limit || (len(ps) == maxPage && limit == maxPage) {
		ps = ps[:limit]
		more = "more: " + moreCommand("parked ls", ps[len(ps)-1].ID, [2]string{"poller", o.poller}, [2]string{"partition", partLabel(o.partition)},
			[2]string{"kind", kind}, [2]string{"limit", limitFlag(limit, maxPage)})
	}
	rows := make([]parkedRow, len(ps))
	for i, p := range ps {
		rows[i] = parkedRow{o.poller, o.partition, p}
	}
	return o.showPage(rows, more)
}

// partLabel is a partition as the flags take it: "-" for an unpartitioned poller's key.
func partLabel(partition string) string {
	if partition == "" {
		return "-"
	}
	return partition
}

// withParked keeps the keys that hold parked rows, counting them a page of keys per round
// trip. It does not look the keys up: a key that does not exist has none.
func withParked(ctx context.Context, eng *watukuy.Engine, keys []watukuytype.Key) ([]watukuytype.Key, error) {
	var out []watukuytype.Key
	for chunk := range slices.Chunk(keys, maxPage) {
		n, err := eng.Parked().Counts(ctx, chunk)
		if err != nil {
			return nil, err
		}
		for i, k := range chunk {
			if n[i] > 0 {
				out = append(out, k)
			}
		}
	}
	return out, nil
}

// showPage shows one page of parked rows: JSON (the line of the next page, more, on stderr)
// or the table and details.
func (o *op) showPage(rows []parkedRow, more string) error {
	if o.asJSON {
		if err := writeJSON(o.out, rows); err != nil || more == "" {
			return err
		}
		_, err := fmt.Fprintln(o.errOut, more)
		return err
	}
	return o.printParked(rows, len(rows), more)
}

// printParked prints the parked rows as a table, then one detail block per row; all is the
// number of rows --limit cut them from, more the line that lists the next page ("" none).
// Without --poller the table has a POLLER column.
func (o *op) printParked(rows []parkedRow, all int, more string) error {
	if len(rows) == 0 {
		where := "any poller"
		switch {
		case o.partitionGiven:
			where = keyName(o.poller, o.partition)
		case o.poller != "":
			where = o.poller
		case more != "":
			where = "the keys this page looked at"
		}
		_, err := fmt.Fprintf(o.out, "no parked rows in %s\n", where)
		if err == nil && more != "" {
			_, err = fmt.Fprintf(o.out, "\n%s\n", more)
		}
		return err
	}
	cols := []string{"PARTITION", "ID", "KIND", "ATTEMPTS", "ORDERING-KEY", "IDENTITY", "PARKED-AT", "ERROR"}
	if o.poller == "" {
		cols = append([]string{"POLLER"}, cols...)
	}
	t := newTable(o.out, cols...)
	for _, r := range rows {
		cells := []string{r.Partition, r.ID, r.Kind, itoa(r.Attempts), r.OrderingKey, r.Identity, r.ParkedAt.UTC().Format(time.RFC3339), clip(r.Error, 60)}
		if o.poller == "" {
			cells = append([]string{r.Poller}, cells...)
		}
		t.row(cells...)
	}
	if err := t.flush(); err != nil {
		return err
	}
	for _, r := range rows {
		fmt.Fprintf(o.out, "\n%s (%s, %s)\n", r.ID, r.Kind, keyName(r.Poller, r.Partition))
		errs := r.Errors
		if len(errs) == 0 && r.Error != "" {
			errs = []string{r.Error}
		}
		fmt.Fprintln(o.out, "  errors:")
		for i, e := range errs {
			fmt.Fprintf(o.out, "    %d. %s\n", i+1, strings.ReplaceAll(e, "\n", "\n       "))
		}
		if r.Stack != "" {
			fmt.Fprintf(o.out, "  stack:\n    %s\n", strings.ReplaceAll(strings.TrimRight(r.Stack, "\n"), "\n", "\n    "))
		}
		if r.OrderingKey != "" {
			fmt.Fprintf(o.out, "  holds ordering key %q: its later events wait until this row is retried or discarded\n", r.OrderingKey)
		}
		if len(r.Event) > 0 {
			fmt.Fprintf(o.out, "  event: %s\n", indentJSON(r.Event))
		}
		if len(r.Item) > 0 {
			fmt.Fprintf(o.out, "  item: %s\n", indentJSON(r.Item))
		}
	}
	if all > len(rows) {
		fmt.Fprintf(o.out, "\nshowing %d of %d parked rows (--limit)\n", len(rows), all)
	}
	poller := o.poller
	if poller == "" {
		poller = "P"
	}
	_, err := fmt.Fprintf(o.out, "\nretry: watukuy parked retry --poller %s --ids ID[,ID...]   discard: watukuy parked discard --poller %[1]s --ids ID[,ID...]   (every row: --all [--kind poison|invalid])\n", poller)
	if err == nil && more != "" {
		_, err = fmt.Fprintf(o.out, "\n%s\n", more)
	}
	return err
}

// indentJSON renders raw JSON indented under a detail block's label.
func indentJSON(raw json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Indent(&b, raw, "  ", "  "); err != nil {
		return string(raw)
	}
	return b.String()
}

// parkedReleaseCmd is parked retry or parked discard. Without --partition the ids are looked
// up in every partition of the poller, as `parked ls` lists them; --all takes every parked row
// there (of one --kind), so a poller that parked every item needs no list of ids.
func parkedReleaseCmd(use, short, done, effect string,
	release func(watukuy.Parked, context.Context, watukuytype.Key, ...string) (int, error)) *cobra.Command {
	o := &op{}
	var ids []string
	var all bool
	var kind string
	return o.command(opSpec{
		use:   use + " --poller P [--partition X] (--ids ID[,ID...] | --all [--kind poison|invalid])",
		short: short,
		keys:  pollerKeys,
		flags: func(fs *pflag.FlagSet) {
			fs.StringSliceVar(&ids, "ids", nil, "ids of the parked rows, as watukuy parked ls lists them")
			fs.BoolVar(&all, "all", false, "every parked row of the poller (of --partition, when given)")
			fs.StringVar(&kind, "kind", "", "with --all: only rows of this kind, poison or invalid")
		},
		check: func(cmd *cobra.Command) error {
			ids = slices.DeleteFunc(ids, func(id string) bool { return strings.TrimSpace(id) == "" })
			switch {
			case kind != "" && kind != "poison" && kind != "invalid":
				return command.Usagef("--kind %q: want poison or invalid", kind)
			case all && len(ids) > 0:
				return command.Usagef("--all and --ids exclude each other: --all takes every parked row")
			case kind != "" && !all:
				return command.Usagef("--kind narrows --all: pass --all --kind %s", kind)
			case !all && len(ids) == 0:
				return command.Usagef("--ids is required, or --all: the ids of the parked rows (`watukuy parked ls --poller P` lists them), or --all [--kind poison|invalid] for every one")
			}
			return nil
		},
		run: func(ctx context.Context, eng *watukuy.Engine) error {
			locate := func() (map[watukuytype.Key][]string, []watukuytype.Key, error) { return o.locateParked(ctx, eng, ids) }
			if all {
				locate = func() (map[watukuytype.Key][]string, []watukuytype.Key, error) { return o.allParked(ctx, eng, kind) }
			}
			byKey, order, err := locate()
			if err != nil {
				return err
			}
			type keyRelease struct {
				Poller    string   `json:"poller"`
				Partition string   `json:"partition"`
				IDs       []string `json:"ids"`
				Released  int      `json:"released"`
			}
			res := []keyRelease{}
			total := 0
			for _, k := range order {
				n, err := release(eng.Parked(), ctx, k, byKey[k]...)
				total += n
				if err != nil {
					if total > 0 {
						err = fmt.Errorf("%w (%d row(s) were %s before it)", err, total, done)
					}
					return err
				}
				res = append(res, keyRelease{k.Poller, k.Partition, byKey[k], n})
			}
			if o.asJSON {
				return writeJSON(o.out, struct {
					Action   string       `json:"action"`
					Released int          `json:"released"`
					Keys     []keyRelease `json:"keys"`
				}{use, total, res})
			}
			if len(res) == 0 {
				_, err := fmt.Fprintf(o.out, "no %sparked rows in %s: nothing %s\n", kindPrefix(kind), o.poller, done)
				return err
			}
			for _, r := range res {
				fmt.Fprintf(o.out, "%s %d parked row(s) of %s: %s\n", done, r.Released, keyName(r.Poller, r.Partition), effect)
			}
			return nil
		},
	})
}

// kindPrefix is "poison " or "invalid " for a --kind, "" for none.
func kindPrefix(kind string) string {
	if kind == "" {
		return ""
	}
	return kind + " "
}

// allParked lists the ids of every parked row of kind ("" for both) in the command's keys,
// by key, skipping keys that have none.
func (o *op) allParked(ctx context.Context, eng *watukuy.Engine, kind string) (map[watukuytype.Key][]string, []watukuytype.Key, error) {
	keys, err := o.keys(ctx, eng)
	if err != nil {
		return nil, nil, err
	}
	if !o.partitionGiven { // a named key's own listing says when it does not exist
		if keys, err = withParked(ctx, eng, keys); err != nil {
			return nil, nil, err
		}
	}
	byKey := map[watukuytype.Key][]string{}
	var order []watukuytype.Key
	for _, k := range keys {
		rows, err := eng.Parked().List(ctx, k, kind)
		if err != nil {
			return nil, nil, err
		}
		for _, r := range rows {
			byKey[k] = append(byKey[k], r.ID)
		}
		if len(rows) > 0 {
			order = append(order, k)
		}
	}
	return byKey, order, nil
}

// locateParked finds the key of every id: the named key, or the partition of the poller
// whose parked rows hold it.
func (o *op) locateParked(ctx context.Context, eng *watukuy.Engine, ids []string) (map[watukuytype.Key][]string, []watukuytype.Key, error) {
	keys, err := o.keys(ctx, eng)
	if err != nil {
		return nil, nil, err
	}
	if len(keys) == 1 {
		return map[watukuytype.Key][]string{keys[0]: ids}, keys, nil
	}
	if keys, err = withParked(ctx, eng, keys); err != nil {
		return nil, nil, err
	}
	where := map[string]watukuytype.Key{}
	for _, k := range keys {
		rows, err := eng.Parked().List(ctx, k, "")
		if err != nil {
			return nil, nil, err
		}
		for _, r := range rows {
			where[r.ID] = k
		}
	}
	byKey := map[watukuytype.Key][]string{}
	var order []watukuytype.Key
	for _, id := range ids {
		k, ok := where[id]
		if !ok {
			return nil, nil, fmt.Errorf("no parked row %q in any partition of %s: `watukuy parked ls --poller %s` lists them", id, o.poller, o.poller)
		}
		if byKey[k] == nil {
			order = append(order, k)
		}
		byKey[k] = append(byKey[k], id)
	}
	return byKey, order, nil
}

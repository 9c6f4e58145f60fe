package config

import (
	"fmt"
	"maps"
	"slices"

	"github.com/goccy/go-yaml/ast"

	"github.com/watukuy/watukuy/internal/budget"
	"github.com/watukuy/watukuy/watukuytype"
)

var budgetKeys = []string{"name", "rate", "burst"}

// budget decodes one entry of budgets: {name, rate: "40/s", burst}.
func (d *decoder) budget(n ast.Node, field string) (Budget, bool) {
	at := posOf(n)
	b := Budget{Line: at.line}
	ok := true
	present := d.object(n, field, budgetKeys, func(key string, kat pos, v ast.Node, fp string) {
		switch key {
		case "name":
			b.Name, _ = d.str(v, fp)
			b.nameAt = posOf(v)
		case "rate":
			s, sok := d.str(v, fp)
			if !sok {
				ok = false
				return
			}
			var err error
			if b.Rate, b.Per, err = budget.ParseRate(s); err != nil {
				d.errAt(posOf(v), fp, "%v", err)
				ok = false
			}
		case "burst":
			if n, iok := d.int(v, fp); iok {
				if n < 1 {
					d.errAt(posOf(v), fp, "must be at least 1")
					ok = false
				}
				b.Burst = n
			}
		}
	})
	for _, k := range []string{"name", "rate"} {
		if _, given := present[k]; !given {
			d.errAt(at, join(field, k), "required")
			ok = false
		}
	}
	if !ok {
		return b, false
	}
	if _, err := budget.WithDefaults(b.Budget); err != nil {
		ce := err.(*watukuytype.ConfigError)
		d.errAt(at, join(field, ce.Field[len("budgets."):]), "%s", ce.Msg)
		return b, false
	}
	return b, true
}

// checkBudgets: budget names are unique, and every poller's budget is one of them.
func (d *decoder) checkBudgets(cfg *Config) {
	defined := map[string]int{}
	for i, b := range cfg.Budgets {
		if j, dup := defined[b.Name]; dup {
			d.errAt(b.nameAt, index("budgets", i)+".name", "duplicate budget name %q (first at line %d)", b.Name, cfg.Budgets[j].Line)
			continue
		}
		defined[b.Name] = i
	}
	for i, p := range cfg.Pollers {
		if _, ok := defined[p.Budget]; p.Budget == "" || ok {
			continue
		}
		d.errAt(p.budgetAt, index("pollers", i)+".budget", "names budget %q, which budgets: does not define%s", p.Budget, knownBudgets(defined))
	}
}

func knownBudgets(defined map[string]int) string {
	if len(defined) == 0 {
		return " (it defines none)"
	}
	return fmt.Sprintf(" (it defines %v)", slices.Sorted(maps.Keys(defined)))
}

// EngineBudgets are the file's budgets as the engine takes them.
func (c *Config) EngineBudgets() []watukuytype.Budget {
	bs := make([]watukuytype.Budget, len(c.Budgets))
	for i, b := range c.Budgets {
		bs[i] = b.Budget
	}
	return bs
}

package cli

import (
	"strings"
	"testing"
	"unicode"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/watukuy/watukuy/internal/command"
)

// Every command's --help has an Examples section whose lines run that command, a short
// description in the tree's one style, an Environment section where it reads variables, and
// no flag usage with backticks (pflag turns `x` into the flag's value name).
func TestHelp(t *testing.T) {
	t.Parallel()
	seen := 0
	for _, root := range []*cobra.Command{Root(), command.Worker(), command.Scheduler()} {
		var walk func(c *cobra.Command)
		walk = func(c *cobra.Command) {
			seen++
			name := c.CommandPath()
			if c.Runnable() && c.Name() != "help" && c.Name() != "completion" && !strings.HasPrefix(c.CommandPath(), "watukuy completion") {
				if c.Example == "" {
					t.Errorf("%s --help has no Examples", name)
				}
				for _, l := range strings.Split(c.Example, "\n") {
					if f := strings.Fields(l); len(f) > 0 && f[0] != "kill" && f[0] != "WATUKUY_REDIS_URL=redis://…" && !strings.HasPrefix(strings.Join(f, " "), c.CommandPath()) &&
						!strings.HasPrefix(strings.Join(f, " "), "watukuy-"+strings.TrimPrefix(c.CommandPath(), "watukuy ")) {
						t.Errorf("%s: example %q does not run the command", name, l)
					}
				}
			}
			if s := c.Short; s == "" || !unicode.IsUpper([]rune(s)[0]) || strings.HasSuffix(s, ".") {
				t.Errorf("%s: short description %q: want a capital first letter and no final period", name, s)
			}
			setting := false
			c.Flags().VisitAll(func(f *pflag.Flag) {
				if strings.Contains(f.Usage, "`") {
					t.Errorf("%s --%s: usage has a backtick: %q", name, f.Name, f.Usage)
				}
				setting = setting || (!command.IsCmdLineOnly(f) && f.Name != "help")
			})
			if setting && !strings.Contains(c.Long, "Environment (a flag given beats it): ") {
				t.Errorf("%s --help does not list its environment variables", name)
			}
			for _, s := range c.Commands() {
				walk(s)
			}
		}
		walk(root)
	}
	if seen < 20 {
		t.Fatalf("walked only %d commands", seen)
	}
}

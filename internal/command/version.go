package command

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/watukuy/watukuy/internal/buildinfo"
)

// VersionCmd prints the build: watukuy's module version, the VCS revision and time of the
// checkout it was built from, and the Go version (the upgrade runbook compares them).
func VersionCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version, VCS revision and Go version of this build",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			in := buildinfo.Read()
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(in)
			}
			_, err := fmt.Fprintln(cmd.OutOrStdout(), "watukuy "+in.String())
			return err
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the build information as JSON")
	return cmd
}

// WithVersion gives a root command --version (cobra's flag, printing the same line as the
// version command).
func WithVersion(root *cobra.Command) *cobra.Command {
	root.Version = buildinfo.Read().String()
	root.SetVersionTemplate("watukuy {{.Version}}\n")
	return root
}

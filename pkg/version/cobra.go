package version

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

// AddTo makes a command answer `--version` and `version` with this
// binary's build (one line; `version -o json` for a machine).
//
// The flag is root's own boolean: a binary that links Kubernetes components
// also has component-base's --version (another type) on pflag.CommandLine,
// which cobra would otherwise take for root's and fail to read, and which
// its subcommands inherit; given to one of them, it prints this build too
// instead of being ignored.
func AddTo(root *cobra.Command) {
	root.Version = Get().String()
	root.SetVersionTemplate(root.Name() + " {{.Version}}\n")
	root.Flags().Bool("version", false, "print the version and commit this binary was built from")
	inherited := root.PersistentPreRunE
	root.PersistentPreRunE = func(cmd *cobra.Command, args []string) error {
		if f := cmd.Flags().Lookup("version"); f != nil && f.Changed && f.Value.String() != "false" {
			fmt.Fprintln(cmd.OutOrStdout(), root.Name()+" "+Get().String())
			os.Exit(0)
		}
		if inherited != nil {
			return inherited(cmd, args)
		}
		return nil
	}
	var output string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version and commit this binary was built from",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			info := Get()
			switch output {
			case "":
				_, err := fmt.Fprintln(cmd.OutOrStdout(), root.Name()+" "+info.String())
				return err
			case "json":
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(info)
			default:
				return fmt.Errorf("unknown output %q: want json or nothing", output)
			}
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "json, or nothing for one line")
	root.AddCommand(cmd)
}

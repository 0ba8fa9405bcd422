package commands

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/shardctl/shardctl/commands/cmdutil"
	"github.com/shardctl/shardctl/commands/output"
	"github.com/shardctl/shardctl/internal/version"
)

// VersionOptions prints the build identity.
type VersionOptions struct {
	g       *cmdutil.Globals
	printer *output.Printer
}

// NewCmdVersion builds `shardctl version`.
func NewCmdVersion(g *cmdutil.Globals) *cobra.Command {
	o := &VersionOptions{g: g}
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit, build date and Go version",
		Example: `  shardctl version
  shardctl version -o json | jq -r .version`,
		Args:              cobra.NoArgs,
		GroupID:           cmdutil.GroupOther,
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE:              cmdutil.RunOptions(o),
	}
}

func (o *VersionOptions) Complete(*cobra.Command, []string) (err error) {
	o.printer, err = o.g.Printer()
	return err
}

func (o *VersionOptions) Validate() error { return nil }

func (o *VersionOptions) Run(context.Context) error {
	return o.printer.Print(versionView{version.Get()})
}

// versionView adds the table form; its JSON is version.Info's.
type versionView struct{ version.Info }

func (versionView) Header(wide bool) []string {
	h := []string{"VERSION", "COMMIT", "DATE", "GO"}
	if wide {
		h = append(h, "PLATFORM")
	}
	return h
}

func (v versionView) Rows(wide bool, _ output.Colors) [][]string {
	commit := v.Commit
	if !wide && len(commit) > 12 {
		commit = commit[:12]
	}
	r := []string{v.Version, commit, v.Date, v.GoVersion}
	if wide {
		r = append(r, v.Platform)
	}
	return [][]string{r}
}

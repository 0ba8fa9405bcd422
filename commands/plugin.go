package commands

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/shardctl/shardctl/commands/cmdutil"
	"github.com/shardctl/shardctl/commands/output"
	"github.com/shardctl/shardctl/plugins"
)

// NewCmdPlugin builds `shardctl plugin`.
func NewCmdPlugin(g *cmdutil.Globals, root *cobra.Command) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "plugin",
		Short: "List plugins, or install shardctl as the kubectl plugin \"kubectl shard\"",
		Long: `Plugins extend shardctl without changing it: an executable named shardctl-NAME
on PATH runs as "shardctl NAME", receiving the remaining arguments and the
environment, and its exit code becomes shardctl's. "shardctl a b" tries
shardctl-a-b before shardctl-a; a dash inside a word is an underscore in the
file name ("shardctl foo-bar" runs shardctl-foo_bar). Built-in commands
always win over plugins.`,
		GroupID: cmdutil.GroupOther,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cmdutil.Usagef("missing subcommand: use one of list, install-kubectl")
		},
	}
	cmd.AddCommand(newCmdPluginList(g, root), newCmdPluginInstallKubectl(g))
	return cmd
}

// PluginListOptions lists the plugins on PATH.
type PluginListOptions struct {
	g        *cmdutil.Globals
	root     *cobra.Command
	nameOnly bool
	printer  *output.Printer
}

func newCmdPluginList(g *cmdutil.Globals, root *cobra.Command) *cobra.Command {
	o := &PluginListOptions{g: g, root: root}
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the shardctl-* plugins on PATH and warn about ones that cannot run",
		Long: `List every file named shardctl-* on PATH, in PATH order. A plugin that is not
executable, that is overshadowed by a file of the same name earlier on PATH,
or whose name a built-in command takes, is listed with a warning, and the
command then exits 1 (as kubectl plugin list does).`,
		Example: `  shardctl plugin list
  shardctl plugin list -o json | jq -r '.plugins[].path'`,
		Args:              cobra.NoArgs,
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE:              cmdutil.RunOptions(o),
	}
	cmd.Flags().BoolVar(&o.nameOnly, "name-only", false, "print only the plugin file names, one per line")
	return cmd
}

func (o *PluginListOptions) Complete(*cobra.Command, []string) (err error) {
	o.printer, err = o.g.Printer()
	return err
}

func (o *PluginListOptions) Validate() error {
	if o.nameOnly && o.printer.Format.Machine() {
		return fmt.Errorf("--name-only prints plain names; it cannot be combined with -o %s", o.printer.Format)
	}
	return nil
}

func (o *PluginListOptions) Run(context.Context) error {
	list, err := o.g.Plugins.List(isBuiltin(o.root))
	if err != nil {
		return err
	}
	warnings := 0
	for _, p := range list {
		warnings += len(p.Warnings)
	}
	switch {
	case o.nameOnly:
		for _, p := range list {
			fmt.Fprintln(o.g.Streams.Out, p.Name)
		}
	case o.printer.Format.Machine():
		if err := o.printer.Print(pluginList{Plugins: list}); err != nil {
			return err
		}
	case len(list) == 0:
		fmt.Fprintf(o.g.Streams.ErrOut, "No plugins found: no file named %s* is on PATH.\n", plugins.Prefix)
	default:
		if err := o.printer.Print(pluginList{Plugins: list}); err != nil {
			return err
		}
	}
	if !o.printer.Format.Machine() {
		for _, p := range list {
			for _, w := range p.Warnings {
				o.g.Warnf("%s", w)
			}
		}
	}
	if warnings > 0 {
		return fmt.Errorf("%d plugin warning(s) found: fix or remove the files named above", warnings)
	}
	return nil
}

// pluginList is the -o json document of `plugin list`.
type pluginList struct {
	Plugins []plugins.Plugin `json:"plugins"`
}

func (pluginList) Header(wide bool) []string {
	h := []string{"COMMAND", "PATH", "STATUS"}
	if wide {
		h = append(h, "WARNINGS")
	}
	return h
}

func (l pluginList) Rows(wide bool, c output.Colors) [][]string {
	rows := make([][]string, 0, len(l.Plugins))
	for _, p := range l.Plugins {
		status := c.Good("ok")
		if len(p.Warnings) > 0 {
			status = c.Warn("warning")
		}
		r := []string{p.Command, p.Path, status}
		if wide {
			r = append(r, strings.Join(p.Warnings, "; "))
		}
		rows = append(rows, r)
	}
	return rows
}

// PluginInstallKubectlOptions links shardctl into kubectl's plugin path.
type PluginInstallKubectlOptions struct {
	g       *cmdutil.Globals
	dir     string
	force   bool
	self    string
	printer *output.Printer
}

func newCmdPluginInstallKubectl(g *cmdutil.Globals) *cobra.Command {
	o := &PluginInstallKubectlOptions{g: g}
	cmd := &cobra.Command{
		Use:   "install-kubectl",
		Short: "Install shardctl as \"kubectl shard\" (kubectl-shard and kubectl_complete-shard links)",
		Long: `Create kubectl-shard and kubectl_complete-shard in --dir, both linking to this
binary. kubectl then runs "kubectl shard ..." as shardctl, and kubectl 1.26 or
newer completes its arguments. --dir defaults to the directory of this binary
and must be on PATH for kubectl to find the plugin.`,
		Example: `  shardctl plugin install-kubectl
  shardctl plugin install-kubectl --dir ~/.local/bin
  kubectl shard version`,
		Args:              cobra.NoArgs,
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE:              cmdutil.RunOptions(o),
	}
	cmd.Flags().StringVar(&o.dir, "dir", "", "directory for the links (default: the directory of this binary)")
	cmd.Flags().BoolVar(&o.force, "force", false, "replace files of those names that are not links to this binary")
	_ = cmd.MarkFlagDirname("dir")
	return cmd
}

func (o *PluginInstallKubectlOptions) Complete(*cobra.Command, []string) error {
	var err error
	if o.printer, err = o.g.Printer(); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find this binary: %w", err)
	}
	if o.self, err = filepath.EvalSymlinks(self); err != nil {
		return fmt.Errorf("find this binary: %w", err)
	}
	if o.dir == "" {
		o.dir = filepath.Dir(o.self)
	}
	return nil
}

func (o *PluginInstallKubectlOptions) Validate() error {
	if strings.Contains(o.self, string(filepath.Separator)+"go-build") {
		return fmt.Errorf("this binary is a temporary `go run` build (%s); build or install shardctl first (make build, go install ./cmd/shardctl)", o.self)
	}
	return nil
}

func (o *PluginInstallKubectlOptions) Run(context.Context) error {
	links, err := plugins.InstallKubectl(o.dir, o.self, o.force)
	if err != nil {
		return err
	}
	if err := o.printer.Print(linkList{Links: links}); err != nil {
		return err
	}
	if !plugins.OnPath(o.dir, o.g.Getenv("PATH")) {
		o.g.Warnf("%s is not on PATH: kubectl finds plugins only on PATH", o.dir)
	}
	return nil
}

type linkList struct {
	Links []plugins.LinkResult `json:"links"`
}

func (linkList) Header(bool) []string { return []string{"PATH", "TARGET", "ACTION"} }

func (l linkList) Rows(_ bool, _ output.Colors) [][]string {
	rows := make([][]string, 0, len(l.Links))
	for _, k := range l.Links {
		rows = append(rows, []string{k.Path, k.Target, k.Action})
	}
	return rows
}

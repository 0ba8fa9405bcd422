package commands

import (
	"context"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/shardctl/shardctl/commands/cmdutil"
	"github.com/shardctl/shardctl/completions"
)

// CompletionOptions writes a shell completion script.
type CompletionOptions struct {
	g     *cmdutil.Globals
	root  *cobra.Command
	shell string
}

// NewCmdCompletion builds `shardctl completion SHELL`.
func NewCmdCompletion(g *cmdutil.Globals, root *cobra.Command) *cobra.Command {
	o := &CompletionOptions{g: g, root: root}
	name := root.Name()
	return &cobra.Command{
		Use:   "completion " + strings.Join(completions.Shells, "|"),
		Short: "Print the shell completion script for bash, zsh, fish or PowerShell",
		Long: `Print a shell completion script. Completion covers commands, flags, plugin
names, kubeconfig contexts, output formats, and shard ids and pools read live
from the registry (bounded to ` + completions.Timeout.String() + `, so an unreachable registry never
blocks the shell).

bash needs the bash-completion package (apt-get install bash-completion).`,
		Example: `  # bash, this shell only
  source <(` + name + ` completion bash)
  # bash, every shell
  ` + name + ` completion bash > /etc/bash_completion.d/` + name + `

  # zsh: a directory on $fpath, then start a new shell
  ` + name + ` completion zsh > "${fpath[1]}/_` + name + `"

  # fish
  ` + name + ` completion fish > ~/.config/fish/completions/` + name + `.fish

  # PowerShell
  ` + name + ` completion powershell | Out-String | Invoke-Expression`,
		GroupID:               cmdutil.GroupOther,
		ValidArgs:             completions.Shells,
		Args:                  shellArg,
		DisableFlagsInUseLine: true,
		RunE:                  cmdutil.RunOptions(o),
	}
}

func shellArg(_ *cobra.Command, args []string) error {
	if len(args) != 1 || !slices.Contains(completions.Shells, args[0]) {
		return cmdutil.Usagef("name one shell: %s", strings.Join(completions.Shells, ", "))
	}
	return nil
}

func (o *CompletionOptions) Complete(_ *cobra.Command, args []string) error {
	o.shell = args[0]
	return nil
}

func (o *CompletionOptions) Validate() error { return nil }

func (o *CompletionOptions) Run(context.Context) error {
	return completions.Script(o.root, o.shell, o.g.Streams.Out)
}

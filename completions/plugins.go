package completions

import (
	"bytes"
	"context"
	"os/exec"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
)

// PluginCommand stands for a plugin while the shell asks for completions,
// so that `shardctl <TAB>` offers plugins beside the built-in commands and
// `shardctl NAME <TAB>` completes the plugin's own arguments. As kubectl
// does for its plugins, the arguments are completed by the executable
// shardctl_complete-NAME on PATH, if there is one, which answers in
// cobra's __complete format (candidates, then ":directive").
func PluginCommand(name string, lookPath func(string) (string, error)) *cobra.Command {
	return &cobra.Command{
		Use:                name,
		Short:              "The plugin shardctl-" + name,
		DisableFlagParsing: true,
		// Never runs (shardctl dispatches plugins before cobra); cobra
		// offers only runnable commands as completions.
		Run: func(*cobra.Command, []string) {},
		ValidArgsFunction: func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
			helper, err := lookPath("shardctl_complete-" + strings.ReplaceAll(name, "-", "_"))
			if err != nil {
				return nil, cobra.ShellCompDirectiveDefault
			}
			ctx, cancel := context.WithTimeout(context.Background(), Timeout)
			defer cancel()
			out, err := exec.CommandContext(ctx, helper, append(args, toComplete)...).Output()
			if err != nil {
				cobra.CompDebugln("plugin completion helper failed: "+err.Error(), false)
				return nil, cobra.ShellCompDirectiveDefault
			}
			return parseCompletions(out)
		},
	}
}

// parseCompletions reads cobra's __complete output: one candidate per
// line, the last line ":N" with the directive.
func parseCompletions(out []byte) ([]cobra.Completion, cobra.ShellCompDirective) {
	lines := strings.Split(strings.TrimRight(string(bytes.TrimSpace(out)), "\n"), "\n")
	directive := cobra.ShellCompDirectiveDefault
	if n := len(lines); n > 0 && strings.HasPrefix(lines[n-1], ":") {
		if d, err := strconv.Atoi(strings.TrimPrefix(lines[n-1], ":")); err == nil {
			directive = cobra.ShellCompDirective(d)
		}
		lines = lines[:n-1]
	}
	var comps []cobra.Completion
	for _, l := range lines {
		if l != "" {
			comps = append(comps, l)
		}
	}
	return comps, directive
}

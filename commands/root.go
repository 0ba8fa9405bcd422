// Package commands is the root of the shardctl command tree: it assembles
// the verb groups' packages (cmdutil, serve, shards, cutover, observe,
// probe), dispatches plugins, and holds the small commands of its own
// (plugin, completion, version). Each command is an options struct with
// Complete (fill in from flags and environment), Validate (reject bad flag
// combinations, naming the flag) and Run (call the package that does the
// work and print its result through the output layer), as kubectl's
// commands are. No business logic lives here.
// It may import every room of the module; nothing but cmd/shardctl imports
// it (internal/architecture checks).
package commands

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/shardctl/shardctl/commands/cmdutil"
	"github.com/shardctl/shardctl/commands/cutover"
	"github.com/shardctl/shardctl/commands/observe"
	"github.com/shardctl/shardctl/commands/probe"
	"github.com/shardctl/shardctl/commands/serve"
	"github.com/shardctl/shardctl/commands/shards"
	"github.com/shardctl/shardctl/completions"
	"github.com/shardctl/shardctl/plugins"
)

// Command groups, in the order help lists them. A group appears only once
// a command belongs to it.
var groups = []*cobra.Group{
	{ID: cmdutil.GroupRuntime, Title: "Runtimes:"},
	{ID: cmdutil.GroupOperate, Title: "Operating Commands:"},
	{ID: cmdutil.GroupObserve, Title: "Observing Commands:"},
	{ID: cmdutil.GroupOther, Title: "Other Commands:"},
}

// NewRootCommand builds the whole command tree around g.
func NewRootCommand(g *cmdutil.Globals) *cobra.Command {
	name := g.DisplayName
	root := &cobra.Command{
		Use:   strings.ReplaceAll(name, " ", "-"),
		Short: "Run and operate a Zeebe workload on several small clusters as if it were one",
		Long: fmt.Sprintf(`%[1]s runs a Zeebe (Camunda 8) workload on several small clusters ("shards")
as if it were one gateway, and operates it: a federation proxy, a registry of
shards, live signals, Blue-Green cutover and drain, probes and a simulator.

Every command works without a terminal: -o json prints one JSON document (JSON
lines with --watch). Exit codes: 0 ok, 1 error, 2 usage error, 3 a gate or
check refused (or a cutover rolled back), 4 timed out waiting, 5 a cutover
paused for cutover promote, 6 inconclusive (a gate without data).

Executables named shardctl-NAME on PATH run as "%[1]s NAME".`, name),
		Example: `  # the whole federation in one process, with the dashboard
  shardctl demo --scenario monolith

  # what the registry knows, and what the proxies see
  shardctl shards list -o wide
  shardctl probe health

  # the signals of every shard the registry lists, live
  shardctl top --registry http://127.0.0.1:8761/eureka

  # move new work from blue to green, step by step, gated by signals
  shardctl cutover apply --from blue --to green --yes`,
		SilenceErrors: true,
		SilenceUsage:  true,
		// Bare `shardctl` shows help rather than an error.
		Run: func(cmd *cobra.Command, _ []string) { _ = cmd.Help() },
		CompletionOptions: cobra.CompletionOptions{
			// `completion` is our own command, with setup help per shell.
			DisableDefaultCmd: true,
		},
	}
	if name != root.Use {
		root.Annotations = map[string]string{cobra.CommandDisplayNameAnnotation: name}
	}
	root.SetIn(g.Streams.In)
	root.SetOut(g.Streams.Out)
	root.SetErr(g.Streams.ErrOut)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return cmdutil.UsageError(err) })
	g.AddFlags(root)

	root.AddCommand(
		serve.NewCmdDemo(g),
		serve.NewCmdProxy(g),
		serve.NewCmdRegistry(g),
		serve.NewCmdSim(g),
		shards.NewCmdShards(g),
		shards.NewCmdDrain(g),
		shards.NewCmdUndrain(g),
		cutover.NewCmdCutover(g),
		cutover.NewCmdMigrate(g),
		observe.NewCmdSignals(g),
		observe.NewCmdTop(g),
		probe.NewCmdProbe(g),
		NewCmdPlugin(g, root),
		NewCmdCompletion(g, root),
		NewCmdVersion(g),
	)
	for _, grp := range groups {
		for _, c := range root.Commands() {
			if c.GroupID == grp.ID {
				root.AddGroup(grp)
				break
			}
		}
	}
	root.SetHelpCommandGroupID(cmdutil.GroupOther)
	if name != plugins.StandaloneDisplayName {
		renameInHelp(root, name)
	}
	return root
}

// commandInText is shardctl run as a command in help text ("shardctl
// drain …", `shardctl top`), not a part of another word (shardctl-NAME,
// SHARDCTL_REGISTRY, shardctl.io/…).
var commandInText = regexp.MustCompile("(^|[\\s\"'`(])" + plugins.StandaloneDisplayName + " ([a-z-])")

// renameInHelp has the examples and long help of every command say the
// name the binary runs as (kubectl shard), as its usage lines do.
func renameInHelp(c *cobra.Command, name string) {
	c.Example = commandInText.ReplaceAllString(c.Example, "${1}"+name+" ${2}")
	c.Long = commandInText.ReplaceAllString(c.Long, "${1}"+name+" ${2}")
	for _, sub := range c.Commands() {
		renameInHelp(sub, name)
	}
}

// isBuiltin reports whether the words select a built-in command, by the
// same rule the dispatcher uses: cobra finds a command other than the root.
func isBuiltin(root *cobra.Command) plugins.IsBuiltin {
	return func(words []string) bool {
		c, _, err := root.Find(words)
		return err == nil && c != root
	}
}

// Main runs shardctl with os.Args-style args and returns the exit code.
func Main(args []string, streams genericiooptions.IOStreams) int {
	inv := plugins.InvokedAs(args[0])
	g := &cmdutil.Globals{
		Streams:     streams,
		Getenv:      os.Getenv,
		DisplayName: plugins.StandaloneDisplayName,
		Plugins:     plugins.FromEnv(),
	}
	rest := args[1:]
	switch inv {
	case plugins.KubectlPlugin:
		g.DisplayName = plugins.KubectlDisplayName
	case plugins.KubectlComplete:
		// kubectl runs kubectl_complete-shard with the words typed after
		// "kubectl shard"; answer as cobra's hidden __complete would.
		g.DisplayName = plugins.KubectlDisplayName
		rest = append([]string{cobra.ShellCompRequestCmd}, rest...)
	}
	root := NewRootCommand(g)
	root.SetArgs(rest)

	if len(rest) > 0 {
		switch rest[0] {
		case cobra.ShellCompRequestCmd, cobra.ShellCompNoDescRequestCmd:
			addPluginCompletions(root, g)
		case "help":
		default:
			if code, ran := dispatchPlugin(root, g, rest); ran {
				return code
			}
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return cmdutil.ExitOK
	}
	code := cmdutil.CodeOf(err)
	switch code {
	case cmdutil.ExitPaused, cmdutil.ExitUnknown:
		// A cutover that waits for an operator did what it was told:
		// its state, not an error.
		fmt.Fprintf(streams.ErrOut, "%s\n", err)
	default:
		fmt.Fprintf(streams.ErrOut, "error: %s\n", err)
	}
	if code == cmdutil.ExitUsage && cmd != nil {
		fmt.Fprintf(streams.ErrOut, "See '%s --help' for usage.\n", cmd.CommandPath())
	}
	return code
}

// dispatchPlugin runs shardctl-NAME when the words are no built-in command.
func dispatchPlugin(root *cobra.Command, g *cmdutil.Globals, args []string) (int, bool) {
	if _, _, err := root.Find(args); err == nil {
		return 0, false
	}
	m, ok, err := g.Plugins.Find(args)
	if err != nil || !ok {
		// Let cobra report the unknown command, with its suggestions.
		return 0, false
	}
	code, err := plugins.Run(context.Background(), m.Path, m.Args, os.Environ(), g.Streams.In, g.Streams.Out, g.Streams.ErrOut)
	if err != nil {
		fmt.Fprintf(g.Streams.ErrOut, "error: %s\n", err)
	}
	return code, true
}

// addPluginCompletions lets `shardctl <TAB>` offer plugins next to the
// built-in commands, and delegates their arguments to their helpers.
func addPluginCompletions(root *cobra.Command, g *cmdutil.Globals) {
	builtin := isBuiltin(root)
	for _, name := range g.Plugins.Names(builtin) {
		root.AddCommand(completions.PluginCommand(name, g.Plugins.LookPath))
	}
}

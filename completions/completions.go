// Package completions holds the shell completion scripts and the dynamic
// completers that commands attach to their arguments and flags: shard ids
// and pools (from the registry), kubeconfig contexts, output formats and
// plugin names.
// It imports no runtime: completers read through the api packages.
package completions

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// Shells lists the shells `shardctl completion` writes scripts for.
var Shells = []string{"bash", "zsh", "fish", "powershell"}

// Script writes the completion script for shell, for the command tree
// rooted at root. Descriptions are included where the shell shows them.
func Script(root *cobra.Command, shell string, w io.Writer) error {
	switch shell {
	case "bash":
		return root.GenBashCompletionV2(w, true)
	case "zsh":
		return root.GenZshCompletion(w)
	case "fish":
		return root.GenFishCompletion(w, true)
	case "powershell":
		return root.GenPowerShellCompletionWithDesc(w)
	}
	return fmt.Errorf("unsupported shell %q: use one of %s", shell, strings.Join(Shells, ", "))
}

// Timeout bounds one dynamic lookup: a completion that hangs on an
// unreachable registry is worse than none.
const Timeout = 2 * time.Second

// Item is one completion candidate with an optional description.
type Item struct {
	Value       string
	Description string
}

// Catalog is where the dynamic completers get their candidates. The
// registry client implements it; a command that needs no registry never
// builds one, which is why completers take a constructor.
type Catalog interface {
	ShardIDs(ctx context.Context) ([]Item, error)
	Pools(ctx context.Context) ([]Item, error)
}

// ShardIDs completes a shard id argument from the catalog.
func ShardIDs(open func() (Catalog, error)) cobra.CompletionFunc {
	return fromCatalog(open, Catalog.ShardIDs)
}

// Pools completes a pool name (an argument or a --from/--to flag).
func Pools(open func() (Catalog, error)) cobra.CompletionFunc {
	return fromCatalog(open, Catalog.Pools)
}

func fromCatalog(open func() (Catalog, error), list func(Catalog, context.Context) ([]Item, error)) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return Lookup(cmd.Context(), toComplete, func(ctx context.Context) ([]Item, error) {
			c, err := open()
			if err != nil {
				return nil, err
			}
			return list(c, ctx)
		})
	}
}

// Lookup runs one bounded dynamic lookup and turns its items into
// completions that start with toComplete. A failed lookup offers nothing
// and says why in cobra's debug log (BASH_COMP_DEBUG_FILE), never on the
// terminal.
func Lookup(ctx context.Context, toComplete string, list func(context.Context) ([]Item, error)) ([]cobra.Completion, cobra.ShellCompDirective) {
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	items, err := list(ctx)
	if err != nil {
		cobra.CompDebugln("dynamic completion failed: "+err.Error(), false)
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return Filter(items, toComplete), cobra.ShellCompDirectiveNoFileComp
}

// Filter keeps the items that start with prefix, sorted and without
// duplicates.
func Filter(items []Item, prefix string) []cobra.Completion {
	seen := map[string]bool{}
	var out []cobra.Completion
	sort.Slice(items, func(i, j int) bool { return items[i].Value < items[j].Value })
	for _, it := range items {
		if !strings.HasPrefix(it.Value, prefix) || seen[it.Value] {
			continue
		}
		seen[it.Value] = true
		if it.Description != "" {
			out = append(out, cobra.CompletionWithDesc(it.Value, it.Description))
		} else {
			out = append(out, it.Value)
		}
	}
	return out
}

// Values completes a fixed set of words, such as the -o formats.
func Values(values ...string) cobra.CompletionFunc {
	items := make([]Item, len(values))
	for i, v := range values {
		items[i] = Item{Value: v}
	}
	return func(_ *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return Filter(items, toComplete), cobra.ShellCompDirectiveNoFileComp
	}
}

// Contexts completes kubeconfig context names; names come from the
// kubeconfig that --kubeconfig / KUBECONFIG select, as kubectl reads them.
func Contexts(names func() ([]string, error)) cobra.CompletionFunc {
	return func(cmd *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return Lookup(cmd.Context(), toComplete, func(context.Context) ([]Item, error) {
			ns, err := names()
			if err != nil {
				return nil, err
			}
			items := make([]Item, len(ns))
			for i, n := range ns {
				items[i] = Item{Value: n}
			}
			return items, nil
		})
	}
}

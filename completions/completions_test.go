package completions

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardctl/shardctl/internal/budget"
)

type catalog struct {
	shards, pools []Item
	err           error
	delay         time.Duration
}

func (c catalog) wait(ctx context.Context) error {
	select {
	case <-time.After(c.delay):
		return c.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c catalog) ShardIDs(ctx context.Context) ([]Item, error) { return c.shards, c.wait(ctx) }
func (c catalog) Pools(ctx context.Context) ([]Item, error)    { return c.pools, c.wait(ctx) }

func TestCatalogCompleters(t *testing.T) {
	cat := catalog{
		shards: []Item{{"green-2", "UP"}, {"blue-1", "DRAINING"}, {"green-1", "UP"}, {"green-1", "UP"}},
		pools:  []Item{{Value: "blue"}, {Value: "green"}},
	}
	open := func() (Catalog, error) { return cat, nil }
	tests := []struct {
		name   string
		fn     cobra.CompletionFunc
		prefix string
		want   []string
	}{
		{"shards by prefix, sorted, deduplicated", ShardIDs(open), "gr", []string{"green-1\tUP", "green-2\tUP"}},
		{"all shards", ShardIDs(open), "", []string{"blue-1\tDRAINING", "green-1\tUP", "green-2\tUP"}},
		{"pools", Pools(open), "b", []string{"blue"}},
		{"no match", Pools(open), "x", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, dir := tt.fn(&cobra.Command{}, nil, tt.prefix)
			if !slices.Equal(got, tt.want) {
				t.Errorf("got %q, want %q", got, tt.want)
			}
			if dir != cobra.ShellCompDirectiveNoFileComp {
				t.Errorf("directive %v: shard ids are never file names", dir)
			}
		})
	}
}

func TestCatalogFailureOffersNothing(t *testing.T) {
	tests := []struct {
		name string
		open func() (Catalog, error)
	}{
		{"cannot open", func() (Catalog, error) { return nil, errors.New("no registry") }},
		{"lookup fails", func() (Catalog, error) { return catalog{err: errors.New("connection refused")}, nil }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, dir := ShardIDs(tt.open)(&cobra.Command{}, nil, "")
			if len(got) != 0 || dir != cobra.ShellCompDirectiveNoFileComp {
				t.Errorf("got %q, %v; want nothing and no file completion", got, dir)
			}
		})
	}
}

func TestLookupIsBounded(t *testing.T) {
	hang := catalog{shards: []Item{{Value: "late"}}, delay: time.Hour}
	start := time.Now()
	got, _ := ShardIDs(func() (Catalog, error) { return hang, nil })(&cobra.Command{}, nil, "")
	if len(got) != 0 {
		t.Errorf("a timed-out lookup offered %q", got)
	}
	if d := time.Since(start); d > Timeout+budget.Of(2*time.Second) {
		t.Errorf("lookup took %v; it must give up after %v", d, Timeout)
	}
}

func TestValues(t *testing.T) {
	got, _ := Values("table", "wide", "json", "yaml")(nil, nil, "")
	if !slices.Equal(got, []string{"json", "table", "wide", "yaml"}) {
		t.Errorf("got %q", got)
	}
}

func TestParseCompletions(t *testing.T) {
	tests := []struct {
		out  string
		want []string
		dir  cobra.ShellCompDirective
	}{
		{"alpha\nbeta\tdesc\n:4\n", []string{"alpha", "beta\tdesc"}, cobra.ShellCompDirectiveNoFileComp},
		{":0\n", nil, cobra.ShellCompDirectiveDefault},
		{"only\n", []string{"only"}, cobra.ShellCompDirectiveDefault},
	}
	for _, tt := range tests {
		got, dir := parseCompletions([]byte(tt.out))
		if !slices.Equal(got, tt.want) || dir != tt.dir {
			t.Errorf("parseCompletions(%q) = %q, %v; want %q, %v", tt.out, got, dir, tt.want, tt.dir)
		}
	}
}

func TestScript(t *testing.T) {
	root := &cobra.Command{Use: "shardctl"}
	root.AddCommand(&cobra.Command{Use: "version", Run: func(*cobra.Command, []string) {}})
	for _, shell := range Shells {
		var buf bytes.Buffer
		if err := Script(root, shell, &buf); err != nil {
			t.Fatalf("%s: %v", shell, err)
		}
		if !strings.Contains(buf.String(), "shardctl") {
			t.Errorf("%s script does not mention the command", shell)
		}
	}
	if err := Script(root, "tcsh", &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "bash, zsh, fish, powershell") {
		t.Errorf("unsupported shell: %v", err)
	}
}

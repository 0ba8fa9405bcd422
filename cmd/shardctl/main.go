// Command shardctl runs a Zeebe workload on several small clusters as if it
// were one, and operates it. See the commands package for the tree.
// It imports commands/ and nothing else of this module.
package main

import (
	"os"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/shardctl/shardctl/commands"
)

func main() {
	os.Exit(commands.Main(os.Args, genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}))
}

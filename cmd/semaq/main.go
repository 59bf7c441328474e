// Command semaq is the SemaQ broker and its command-line client.
package main

import (
	"os"

	"github.com/semaq/semaq/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

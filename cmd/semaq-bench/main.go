// Command semaq-bench measures SemaQ against raw JetStream (and RabbitMQ) on
// brokers it embeds: semaq-bench ingest|dispatch|tokens|sessions|run. It is
// kept out of the semaq binary; `semaq bench ARGS` runs it with argv[0]
// "semaq bench", and it then names itself that way in its usage and errors.
package main

import (
	"os"

	"github.com/semaq/semaq/internal/benchcli"
)

func main() {
	name := benchcli.Name
	if len(os.Args) > 0 && os.Args[0] == benchcli.SubcommandName {
		name = benchcli.SubcommandName
	}
	os.Exit(benchcli.Main(name, os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

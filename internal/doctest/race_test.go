//go:build race

package doctest

// raceEnabled: the test binary was built with -race, so the semaq it builds is too, from the same cached
// packages (a cold `go test -race ./...` would otherwise compile the tree a second time without it).
const raceEnabled = true

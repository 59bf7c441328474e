//go:build !race

package doctest

const raceEnabled = false

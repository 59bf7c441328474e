// Package scenarios holds the workload scenarios of `semaq bench run`, one
// YAML file each, compiled into the binary so a scenario is named, not
// looked up on disk.
package scenarios

import "embed"

// FS holds every *.yaml scenario of this directory.
//
//go:embed *.yaml
var FS embed.FS

package benchcli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/semaq/semaq/internal/bench"
)

// reportFile is where --json goes. A file is written under a temporary
// name, checked to be writable before the run, and renamed into place once
// the report is complete, so a failed run leaves no partial report.
type reportFile struct {
	stdout io.Writer
	tmp    *os.File
	path   string
}

func openReport(path string, stdout io.Writer) (*reportFile, error) {
	switch path {
	case "":
		return &reportFile{}, nil
	case "-":
		return &reportFile{stdout: stdout, path: path}, nil
	}
	tmp, err := createReportTemp(path)
	if err != nil {
		return nil, fmt.Errorf("--json %s: %w", path, err)
	}
	return &reportFile{tmp: tmp, path: path}, nil
}

func (r *reportFile) write(rep *bench.Report) error {
	switch {
	case r.stdout != nil:
		return rep.WriteJSON(r.stdout)
	case r.tmp == nil:
		return nil
	}
	err := rep.WriteJSON(r.tmp)
	err = errors.Join(err, r.tmp.Close())
	if err == nil {
		err = os.Rename(r.tmp.Name(), r.path)
	}
	if err != nil {
		return fmt.Errorf("--json %s: %w", r.path, err)
	}
	r.tmp = nil
	return nil
}

// abort removes the temporary file of a report that was not written.
func (r *reportFile) abort() {
	if r.tmp != nil {
		r.tmp.Close()
		os.Remove(r.tmp.Name())
	}
}

// writeFileAtomic writes path through a temporary file renamed into place,
// so a failed run leaves no partial file.
func writeFileAtomic(path string, write func(*os.File) error) error {
	tmp, err := createReportTemp(path)
	if err != nil {
		return err
	}
	err = write(tmp)
	err = errors.Join(err, tmp.Close())
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}

// atomicFile is written under a temporary name and renamed into place when
// complete, so a failed run leaves no partial report.
type atomicFile struct {
	tmp  *os.File
	path string
}

func createAtomic(path string) (*atomicFile, error) {
	tmp, err := createReportTemp(path)
	if err != nil {
		return nil, err
	}
	return &atomicFile{tmp: tmp, path: path}, nil
}

// reportMode is the mode of a written report: readable by all, as other
// tools write theirs (os.CreateTemp makes files 0600).
const reportMode = 0o644

// createReportTemp creates the temporary file a report at path is written
// to before it is renamed into place.
func createReportTemp(path string) (*os.File, error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return nil, err
	}
	if err := tmp.Chmod(reportMode); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return nil, err
	}
	return tmp, nil
}

func (a *atomicFile) commit(write func(io.Writer) error) error {
	err := write(a.tmp)
	err = errors.Join(err, a.tmp.Close())
	if err == nil {
		err = os.Rename(a.tmp.Name(), a.path)
	}
	if err == nil {
		a.tmp = nil
	}
	return err
}

func (a *atomicFile) abort() {
	if a.tmp != nil {
		a.tmp.Close()
		os.Remove(a.tmp.Name())
	}
}

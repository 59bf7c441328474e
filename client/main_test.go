package client_test

import (
	"os"
	"testing"

	"github.com/semaq/semaq/internal/plugin/plugintest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	plugintest.Cleanup() // the plugins policy_test.go built
	os.Exit(code)
}

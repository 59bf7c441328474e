package pass

import "testing"

func TestOK(t *testing.T) {}

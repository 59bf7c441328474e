package nobuild

import "testing"

func TestNothing(t *testing.T) { undefinedCall() }

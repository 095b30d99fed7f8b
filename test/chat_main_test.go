package test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a goroutine outlives its test: every server, pipeline, stream
// and client connection must be shut down by its owner.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

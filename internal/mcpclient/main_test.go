package mcpclient_test

import (
	"testing"

	"go.uber.org/goleak"
)

// The SDK runs goroutines per session; Close must have ended them all.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

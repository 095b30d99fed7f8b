// The tests of the realtime endpoint run in this external package because their fixture is the
// real server: internal/server wires internal/realtime, so a test inside package realtime could
// not import it (an import cycle).
package realtime_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/omniserve/omniserve/internal/config"
	"github.com/omniserve/omniserve/internal/server"
	"github.com/omniserve/omniserve/internal/session"
	"github.com/omniserve/omniserve/internal/speech"
)

// fixtureSessions is the server's max_sessions: its ASR pool holds that many decoders plus 4,
// enough for the largest concurrency test.
const fixtureSessions = 16

// fixture is one real server (dummy:tiny generated into a temp dir, pocketsphinx ASR, flite TTS,
// the pipeline of configs/omni-cpu.yaml), built by internal/server as `omniserve serve` builds
// it and shared by the package's tests; each test mounts its own session manager and handler
// over the server's engine backend, with the limits it is about.
type fixture struct {
	srv     *server.Server
	backend session.Backend
	asr     *speech.ASR
	dir     string
	err     error
	// warnings keeps the server's warnings and errors (the engine's failures name their cause
	// there), for tests to print when a session reports an error.
	warnings *observer.ObservedLogs
}

var (
	fxOnce sync.Once
	fx     *fixture
)

func TestMain(m *testing.M) {
	code := m.Run()
	if fx != nil {
		if fx.srv != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			fx.srv.Close(ctx)
			cancel()
		}
		_ = os.RemoveAll(fx.dir)
	}
	if code == 0 {
		if err := goleak.Find(goleak.IgnoreCurrent()); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func getFixture(t testing.TB) *fixture {
	t.Helper()
	fxOnce.Do(func() {
		fx = &fixture{}
		fx.dir, fx.err = os.MkdirTemp("", "omniserve-realtime-test")
		if fx.err != nil {
			return
		}
		_, file, _, _ := runtime.Caller(0)
		root := filepath.Dir(filepath.Dir(filepath.Dir(file)))
		cfg, err := config.Resolve(config.Sources{
			ConfigFlag: filepath.Join(root, "configs", "omni-cpu.yaml"), ConfigFlagSet: true,
			Flags: []config.FlagValue{
				{Name: "model", Value: "dummy:tiny"},
				{Name: "device", Value: "cpu"},
				{Name: "cache-dir", Value: fx.dir},
				{Name: "max-sessions", Value: strconv.Itoa(fixtureSessions)},
			},
		})
		if err != nil {
			fx.err = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		var core zapcore.Core
		core, fx.warnings = observer.New(zap.WarnLevel)
		fx.srv = server.New(cfg, server.Options{Log: zap.New(core)})
		if fx.err = fx.srv.Build(ctx); fx.err != nil {
			return
		}
		fx.backend = fx.srv.Parts().Backend
		fx.asr = fx.srv.Parts().ASR
	})
	if fx.err != nil {
		t.Fatalf("building the test server: %v", fx.err)
	}
	return fx
}

package realtime

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/gpu"
	"github.com/omniserve/omniserve/internal/requestclient"
	"github.com/omniserve/omniserve/internal/session"
	"github.com/omniserve/omniserve/internal/speech"
	"github.com/omniserve/omniserve/internal/stage"
)

// fixture is one real engine (dummy:tiny generated into a temp dir, pocketsphinx ASR, flite TTS,
// the default pipeline) shared by the package's tests; each test builds its own Manager and
// server over it.
type fixture struct {
	backend  *session.PipelineBackend
	client   *requestclient.Client
	pipeline *stage.Pipeline
	asr      *speech.ASR
	closers  []func()
	err      error
}

var (
	fxOnce sync.Once
	fx     *fixture
)

func TestMain(m *testing.M) {
	code := m.Run()
	if fx != nil {
		for i := len(fx.closers) - 1; i >= 0; i-- {
			fx.closers[i]()
		}
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
		dir, err := os.MkdirTemp("", "omniserve-realtime-test")
		if err != nil {
			fx.err = err
			return
		}
		fx.closers = append(fx.closers, func() { _ = os.RemoveAll(dir) })
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		log := zap.NewNop()
		runner, err := gpu.Load(ctx, gpu.Config{Model: "dummy:tiny", CacheDir: dir, Device: "cpu"}, log)
		if err != nil {
			fx.err = err
			return
		}
		fx.closers = append(fx.closers, func() { _ = runner.Close() })
		asr, err := speech.NewASR(speech.ASRConfig{PoolSize: 20}, log)
		if err != nil {
			fx.err = err
			return
		}
		fx.closers = append(fx.closers, asr.Close)
		tts, err := speech.NewTTS(speech.TTSConfig{Voice: "cmu_us_slt", OutputRate: 24000})
		if err != nil {
			fx.err = err
			return
		}
		_, file, _, _ := runtime.Caller(0)
		root := filepath.Dir(filepath.Dir(filepath.Dir(file)))
		pcfg, err := stage.LoadPipelineConfig(filepath.Join(root, "configs", "omni-cpu.yaml"))
		if err != nil {
			fx.err = err
			return
		}
		p, err := stage.New(pcfg, stage.Deps{Engine: runner, ASR: asr, TTS: tts}, log)
		if err != nil {
			fx.err = err
			return
		}
		fx.closers = append(fx.closers, p.Close)
		fx.pipeline = p
		fx.asr = asr
		fx.client = requestclient.New(p, requestclient.Options{ModelName: "dummy:tiny"}, log)
		fx.backend = session.NewPipelineBackend(fx.client, p)
	})
	if fx.err != nil {
		t.Fatalf("building the test pipeline: %v", fx.err)
	}
	return fx
}

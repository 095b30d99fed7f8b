package gpu

// #include <stdint.h>
import "C"

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime/cgo"
	"strings"
	"sync"
	"unsafe"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// ggml_log_level values (ggml.h).
const (
	ggmlLogDebug = 1
	ggmlLogInfo  = 2
	ggmlLogWarn  = 3
	ggmlLogError = 4
	ggmlLogCont  = 5
)

// llamaLogSink assembles llama.cpp's log fragments into lines (the library writes a line in
// pieces, and GGML_LOG_LEVEL_CONT continues the previous piece) and writes each line to zap, so a
// --log-format json stream is all JSON. The library's INFO chatter (~100 lines at model load)
// goes to debug; warnings and errors keep their level.
type llamaLogSink struct {
	log   *zap.Logger
	mu    sync.Mutex
	buf   strings.Builder
	level zapcore.Level
}

func (s *llamaLogSink) write(level int, text string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if level != ggmlLogCont {
		s.level = zapLevel(level)
	}
	for text != "" {
		line, rest, nl := strings.Cut(text, "\n")
		s.buf.WriteString(line)
		if !nl {
			return
		}
		if msg := strings.TrimSpace(s.buf.String()); msg != "" {
			if ce := s.log.Check(s.level, msg); ce != nil {
				ce.Write()
			}
		}
		s.buf.Reset()
		text = rest
	}
}

func zapLevel(level int) zapcore.Level {
	switch level {
	case ggmlLogWarn:
		return zapcore.WarnLevel
	case ggmlLogError:
		return zapcore.ErrorLevel
	default: // debug, info, none
		return zapcore.DebugLevel
	}
}

// logRoute is the process-wide state of the C library's log callback: the handle of the zap
// sink when RouteLlamaLogs is active (0: none), and whether the callback is installed at all.
var logRoute struct {
	mu        sync.Mutex
	handle    uintptr
	installed bool
}

// installLogCallback points the C library's callback at omniLlamaLog (once; RouteLlamaLogs
// re-points it with its handle), so that load errors can be captured even without a zap sink.
func installLogCallback() {
	logRoute.mu.Lock()
	defer logRoute.mu.Unlock()
	if !logRoute.installed {
		routeLlamaLog(logRoute.handle)
		logRoute.installed = true
	}
}

//export omniLlamaLog
func omniLlamaLog(level C.int, text *C.char, userData unsafe.Pointer) {
	if text == nil {
		return
	}
	s := C.GoString(text)
	logTap.add(int(level), s)
	if userData == nil {
		// No zap sink: as the binding's own callback, to stderr at slog's default level
		// (slog levels put INFO at 0 in steps of 4).
		if slog.Default().Enabled(context.TODO(), slog.Level(int(level-ggmlLogInfo)*4)) {
			fmt.Fprint(os.Stderr, s)
		}
		return
	}
	if sink, ok := cgo.Handle(uintptr(userData)).Value().(*llamaLogSink); ok {
		sink.write(int(level), s)
	}
}

// RouteLlamaLogs sends llama.cpp's and ggml's logging to log (named "llama") instead of the
// binding's plain-text stderr writer. The callback is process-wide in the C library; the
// returned function stops the routing (later lines go to the default writer) and frees the
// handle. Call it before loading a model so that the loader's lines are routed too.
func RouteLlamaLogs(log *zap.Logger) (stop func()) {
	if log == nil {
		log = zap.NewNop()
	}
	h := cgo.NewHandle(&llamaLogSink{log: log.Named("llama")})
	logRoute.mu.Lock()
	logRoute.handle, logRoute.installed = uintptr(h), true
	routeLlamaLog(uintptr(h))
	logRoute.mu.Unlock()
	return sync.OnceFunc(func() {
		logRoute.mu.Lock()
		logRoute.handle = 0
		routeLlamaLog(0)
		logRoute.mu.Unlock()
		h.Delete()
	})
}

// llamaLogTap keeps llama.cpp's error lines while a model loads, so that a failed load can say
// why (llama.cpp returns only NULL). The log callback is process-wide, hence one tap.
type llamaLogTap struct {
	mu        sync.Mutex
	capturing bool
	lines     []string
	lastError bool // the previous line was an error, so a continuation line belongs to it
}

var (
	logTap llamaLogTap
	// loadCapture serializes the loads whose log is being captured.
	loadCapture sync.Mutex
)

func (t *llamaLogTap) add(level int, s string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.capturing {
		return
	}
	switch {
	case level == ggmlLogError:
		if line := strings.TrimSpace(s); line != "" && len(t.lines) < 16 {
			t.lines = append(t.lines, line)
		}
		t.lastError = true
	case level == ggmlLogCont && t.lastError && len(t.lines) > 0:
		t.lines[len(t.lines)-1] += strings.TrimRight(s, "\n")
	default:
		t.lastError = false
	}
}

// withLlamaErrors runs f (a llama.cpp call that reports failure only in its log) and returns
// the error lines llama.cpp logged meanwhile, joined with "; ".
func withLlamaErrors(f func()) string {
	installLogCallback()
	loadCapture.Lock()
	defer loadCapture.Unlock()
	logTap.mu.Lock()
	logTap.capturing, logTap.lines, logTap.lastError = true, nil, false
	logTap.mu.Unlock()
	f()
	logTap.mu.Lock()
	defer logTap.mu.Unlock()
	logTap.capturing = false
	return strings.Join(logTap.lines, "; ")
}

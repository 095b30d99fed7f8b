package gpu

// #include <stdint.h>
import "C"

import (
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

//export omniLlamaLog
func omniLlamaLog(level C.int, text *C.char, userData unsafe.Pointer) {
	if userData == nil || text == nil {
		return
	}
	s, ok := cgo.Handle(uintptr(userData)).Value().(*llamaLogSink)
	if !ok {
		return
	}
	s.write(int(level), C.GoString(text))
}

// RouteLlamaLogs sends llama.cpp's and ggml's logging to log (named "llama") instead of the
// binding's plain-text stderr writer. The callback is process-wide in the C library; the
// returned function stops the routing (later lines are dropped) and frees the handle. Call it
// before loading a model so that the loader's lines are routed too.
func RouteLlamaLogs(log *zap.Logger) (stop func()) {
	if log == nil {
		log = zap.NewNop()
	}
	h := cgo.NewHandle(&llamaLogSink{log: log.Named("llama")})
	routeLlamaLog(uintptr(h))
	return sync.OnceFunc(func() {
		routeLlamaLog(0)
		h.Delete()
	})
}

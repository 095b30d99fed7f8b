package gpu

/*
typedef void (*omni_log_fn)(int level, char *text, void *user_data);
extern void llama_log_set(omni_log_fn fn, void *user_data);
extern void omniLlamaLog(int level, char *text, void *user_data);
*/
import "C"

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"unsafe"
)

// ggml_log_level values (ggml.h).
const (
	ggmlLogInfo  = 2
	ggmlLogError = 4
	ggmlLogCont  = 5
)

// llamaLogTap receives llama.cpp's log. The log callback is process-wide in llama.cpp, hence
// one tap per process. Lines go to stderr exactly as the binding's own callback sent them (at
// slog's default level), and while a model loads the error lines are kept, so that a failed
// load can say why (llama.cpp returns only NULL).
type llamaLogTap struct {
	mu        sync.Mutex
	capturing bool
	lines     []string
	lastError bool // the previous line was an error, so a continuation line belongs to it
}

var (
	logTap        llamaLogTap
	installLogTap = sync.OnceFunc(func() { C.llama_log_set(C.omni_log_fn(C.omniLlamaLog), nil) })
	// loadCapture serializes the loads whose log is being captured.
	loadCapture sync.Mutex
)

//export omniLlamaLog
func omniLlamaLog(level C.int, text *C.char, _ unsafe.Pointer) {
	s := C.GoString(text)
	// As the binding's llamaLog: slog levels put INFO at 0 in steps of 4.
	if slog.Default().Enabled(context.TODO(), slog.Level(int(level-ggmlLogInfo)*4)) {
		fmt.Fprint(os.Stderr, s)
	}
	logTap.add(int(level), s)
}

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
	installLogTap()
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

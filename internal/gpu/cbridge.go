package gpu

// The binding (github.com/ollama/ollama/llama) exposes no way to free a context, to turn on the
// unified KV cache, to list backends, to apply a chat template or to read token attributes.
// These few C entry points are declared here by hand (opaque pointers only, no llama.cpp
// headers needed); the symbols come from the binding's own cgo objects in the same binary.
// Every binding struct read or written through unsafe is checked by bindingLayout (layout.go).

/*
#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
// omni_chat_message mirrors struct llama_chat_message (llama.h): two C string pointers.
typedef struct omni_chat_message { const char *role; const char *content; } omni_chat_message;
extern int32_t llama_chat_apply_template(const char *tmpl, const omni_chat_message *chat, size_t n_msg, bool add_ass, char *buf, int32_t length);
extern int32_t llama_chat_builtin_templates(const char **output, size_t len);
extern const char *llama_vocab_get_text(const void *vocab, int32_t token);
extern int llama_vocab_get_attr(const void *vocab, int32_t token);
extern void llama_free(void *ctx);
extern size_t ggml_backend_reg_count(void);
extern void *ggml_backend_reg_get(size_t index);
extern const char *ggml_backend_reg_name(void *reg);
extern size_t ggml_backend_dev_count(void);
extern void *ggml_backend_dev_get(size_t index);
extern const char *ggml_backend_dev_name(void *dev);
extern const char *ggml_backend_dev_description(void *dev);
extern int ggml_backend_dev_type(void *dev);
extern int32_t llama_token_to_piece(const void *vocab, int32_t token, char *buf, int32_t length, int32_t lstrip, bool special);

typedef void (*omni_log_cb)(int level, const char *text, void *user_data);
extern void llama_log_set(omni_log_cb cb, void *user_data);
extern void omniLlamaLog(int level, char *text, void *user_data);
// omni_route_llama_log sends llama.cpp's and ggml's log lines (llama_log_set sets both) to
// omniLlamaLog with h as user data; h == 0 drops them.
static void omni_route_llama_log(uintptr_t h) { llama_log_set((omni_log_cb)omniLlamaLog, (void *)h); }
*/
import "C"

import (
	"errors"
	"slices"
	"unsafe"

	"github.com/ollama/ollama/llama"
)

// routeLlamaLog points the C library's log callback at omniLlamaLog with handle h (0: drop).
func routeLlamaLog(h uintptr) { C.omni_route_llama_log(C.uintptr_t(h)) }

// cContextParams mirrors struct llama_context_params of the pinned llama.cpp (llama.h) so that
// kv_unified and embeddings can be set; llama.ContextParams wraps exactly this struct.
// TestContextParamsLayout and setContextFlags check the mirror against known field values.
type cContextParams struct {
	nCtx, nBatch, nUbatch, nSeqMax                 uint32
	nThreads, nThreadsBatch                        int32
	ropeScalingType, poolingType, attnType, faType int32
	ropeFreqBase, ropeFreqScale                    float32
	yarnExtFactor, yarnAttnFactor                  float32
	yarnBetaFast, yarnBetaSlow                     float32
	yarnOrigCtx                                    uint32
	defragThold                                    float32
	cbEval, cbEvalUserData                         unsafe.Pointer
	typeK, typeV                                   int32
	abortCallback, abortCallbackData               unsafe.Pointer
	embeddings, offloadKQV, noPerf, opOffload      bool
	swaFull, kvUnified                             bool
}

// setContextFlags turns on the unified KV cache (one cache shared by all sequences, so a batch
// of any mix of sequences is one ubatch instead of one per run of consecutive sequence ids) and
// turns off embedding extraction (we only need logits). It reports false, changing nothing, when
// the struct does not look like the mirror.
func setContextFlags(p *llama.ContextParams, nCtx, nSeq, threads int) bool {
	if bindingLayout() != nil || unsafe.Sizeof(*p) != unsafe.Sizeof(cContextParams{}) {
		return false
	}
	c := (*cContextParams)(unsafe.Pointer(p))
	if int(c.nCtx) != nCtx || int(c.nSeqMax) != nSeq || int(c.nThreads) != threads ||
		int(c.nThreadsBatch) != threads || !c.embeddings || !c.offloadKQV {
		return false
	}
	c.kvUnified = true
	c.embeddings = false
	return true
}

// freeContext releases a llama context: llama.Context holds the C pointer as its first field
// (bindingLayout checks it; when the binding's struct changes, the context is leaked rather than
// freed through a wrong field).
func freeContext(ctx *llama.Context) {
	if ctx == nil || bindingLayout() != nil {
		return
	}
	ptr := *(*unsafe.Pointer)(unsafe.Pointer(ctx))
	if ptr != nil {
		C.llama_free(ptr)
		*(*unsafe.Pointer)(unsafe.Pointer(ctx)) = nil
	}
}

// backendNames lists the registered ggml backends (CPU always; CUDA when its library loaded).
func backendNames() []string {
	var out []string
	for i := range C.ggml_backend_reg_count() {
		out = append(out, C.GoString(C.ggml_backend_reg_name(C.ggml_backend_reg_get(i))))
	}
	return out
}

// deviceNames lists every ggml device as "name (description)".
func deviceNames() []string {
	var out []string
	for i := range C.ggml_backend_dev_count() {
		d := C.ggml_backend_dev_get(i)
		out = append(out, C.GoString(C.ggml_backend_dev_name(d))+" ("+C.GoString(C.ggml_backend_dev_description(d))+")")
	}
	return out
}

// plainPiece renders one token as text without special rendering: control tokens (BOS, chat
// markers) are empty, which is what a grammar must see so it never admits them.
func plainPiece(m *llama.Model, tok int) string {
	var buf [64]byte
	n := C.llama_token_to_piece(unsafe.Pointer(m.Vocab()), C.int32_t(tok), (*C.char)(unsafe.Pointer(&buf[0])), C.int32_t(len(buf)), 0, false)
	if n >= 0 {
		return string(buf[:n])
	}
	big := make([]byte, -n)
	n = C.llama_token_to_piece(unsafe.Pointer(m.Vocab()), C.int32_t(tok), (*C.char)(unsafe.Pointer(&big[0])), C.int32_t(len(big)), 0, false)
	if n < 0 {
		return ""
	}
	return string(big[:n])
}

// controlTokens lists the text of every control token of the vocabulary (chat markers, BOS,
// EOS, ...), longest first: the strings that tokenizing with special parsing turns into one
// token.
func controlTokens(m *llama.Model) []string {
	const attrControl = 1 << 3 // LLAMA_TOKEN_ATTR_CONTROL
	vocab := unsafe.Pointer(m.Vocab())
	var out []string
	for id := range m.NumVocab() {
		if C.llama_vocab_get_attr(vocab, C.int32_t(id))&attrControl == 0 {
			continue
		}
		if t := C.GoString(C.llama_vocab_get_text(vocab, C.int32_t(id))); t != "" {
			out = append(out, t)
		}
	}
	slices.SortStableFunc(out, func(a, b string) int { return len(b) - len(a) })
	return out
}

// errUnsupportedTemplate: llama_chat_apply_template does not recognise the template.
var errUnsupportedTemplate = errors.New("llama.cpp does not support this chat template")

// applyTemplate runs llama_chat_apply_template: tmpl is a Jinja template from a GGUF or the
// name of one of llama.cpp's built-in templates ("chatml", "llama3", ...). llama.cpp matches
// the template against the formats it knows; it does not run Jinja. Strings must not contain
// NUL (C strings end there).
func applyTemplate(tmpl string, roles, contents []string, addAssistant bool) (string, error) {
	ctmpl := C.CString(tmpl)
	defer C.free(unsafe.Pointer(ctmpl))
	// Go memory holding C pointers only, which cgo allows to pass.
	msgs := make([]C.omni_chat_message, len(roles))
	size := 256
	for i := range roles {
		msgs[i].role = C.CString(roles[i])
		msgs[i].content = C.CString(contents[i])
		size += 2 * (len(roles[i]) + len(contents[i]) + 32)
	}
	defer func() {
		for _, m := range msgs {
			C.free(unsafe.Pointer(m.role))
			C.free(unsafe.Pointer(m.content))
		}
	}()
	var first *C.omni_chat_message
	if len(msgs) > 0 {
		first = &msgs[0]
	}
	for {
		buf := make([]byte, size)
		n := int(C.llama_chat_apply_template(ctmpl, first, C.size_t(len(msgs)), C.bool(addAssistant),
			(*C.char)(unsafe.Pointer(&buf[0])), C.int32_t(len(buf))))
		if n < 0 {
			return "", errUnsupportedTemplate
		}
		if n <= len(buf) {
			return string(buf[:n]), nil
		}
		size = n
	}
}

// builtinTemplates lists the names of llama.cpp's built-in chat templates.
func builtinTemplates() []string {
	n := int(C.llama_chat_builtin_templates(nil, 0))
	if n <= 0 {
		return nil
	}
	ptrs := make([]*C.char, n)
	n = min(n, int(C.llama_chat_builtin_templates(&ptrs[0], C.size_t(n))))
	out := make([]string, n)
	for i := range n {
		out[i] = C.GoString(ptrs[i])
	}
	return out
}

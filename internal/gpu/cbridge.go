package gpu

// The binding (github.com/ollama/ollama/llama) exposes no way to free a context, to turn on the
// unified KV cache, or to list backends. These few C entry points are declared here by hand
// (opaque pointers only, no llama.cpp headers needed); the symbols come from the binding's own
// cgo objects in the same binary.

/*
#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>
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
*/
import "C"

import (
	"unsafe"

	"github.com/ollama/ollama/llama"
)

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
	if unsafe.Sizeof(*p) != unsafe.Sizeof(cContextParams{}) {
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

// freeContext releases a llama context: llama.Context holds the C pointer as its first field.
func freeContext(ctx *llama.Context) {
	if ctx == nil {
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

package gpu

// llama.cpp's own sampler chain (common_sampler: penalties, top-k, top-p, temperature, seeded
// dist, grammar), called through the C entry points the binding compiles in (sampling_ext.h),
// declared here by hand like cbridge.go's. The binding's SamplingContext wrapper is not used: it
// frees its C memory only from a GC finalizer. This one is freed by its owner.

/*
#include <stdint.h>
#include <stdbool.h>
#include <stdlib.h>
struct common_sampler;
struct common_sampler_cparams {
	int32_t top_k;
	float top_p;
	float min_p;
	float typical_p;
	float temp;
	int32_t penalty_last_n;
	float penalty_repeat;
	float penalty_freq;
	float penalty_present;
	uint32_t seed;
	char *grammar;
};
extern struct common_sampler *common_sampler_cinit(const void *model, struct common_sampler_cparams *params);
extern void common_sampler_cfree(struct common_sampler *sampler);
extern void common_sampler_caccept(struct common_sampler *sampler, int32_t id, bool apply_grammar);
extern int32_t common_sampler_csample(struct common_sampler *sampler, void *ctx, int idx);
extern const void *llama_get_model(const void *ctx);
*/
import "C"

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"github.com/ollama/ollama/llama"
)

// errSamplerFreed answers a sample after the owner freed the sampler (an aborted Generate).
var errSamplerFreed = errors.New("engine: sampler already freed")

// nativeSampler owns one common_sampler. sample and accept run on the scheduler thread; free
// runs on the Generate caller's and may come while the scheduler still holds the job, hence mu.
type nativeSampler struct {
	mu sync.Mutex
	c  *C.struct_common_sampler
}

func newNativeSampler(lctx *llama.Context, p nativeParams) (*nativeSampler, error) {
	if err := bindingLayout(); err != nil {
		return nil, fmt.Errorf("engine: native sampler: %w", err)
	}
	ctx := *(*unsafe.Pointer)(unsafe.Pointer(lctx))
	model := C.llama_get_model(ctx)
	cp := C.struct_common_sampler_cparams{
		top_k: C.int32_t(p.TopK), top_p: C.float(p.TopP), min_p: 0, typical_p: 1, temp: C.float(p.Temp),
		penalty_last_n: C.int32_t(p.LastN), penalty_repeat: C.float(p.Repeat),
		penalty_freq: C.float(p.Freq), penalty_present: C.float(p.Present), seed: C.uint32_t(p.Seed),
	}
	g := C.CString(p.Grammar)
	defer C.free(unsafe.Pointer(g))
	cp.grammar = g
	s := C.common_sampler_cinit(model, &cp)
	if s == nil {
		return nil, &SamplingError{Param: "response_format", Detail: "llama.cpp could not build the sampler (grammar rejected)"}
	}
	return &nativeSampler{c: s}, nil
}

// nativeParams are the settings of the C chain.
type nativeParams struct {
	TopK                  int
	TopP, Temp            float32
	LastN                 int
	Repeat, Freq, Present float32
	Seed                  uint32
	Grammar               string
}

func (n *nativeSampler) sample(lctx *llama.Context, idx int) (int, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.c == nil {
		return -1, errSamplerFreed
	}
	ctx := *(*unsafe.Pointer)(unsafe.Pointer(lctx))
	return int(C.common_sampler_csample(n.c, ctx, C.int(idx))), nil
}

func (n *nativeSampler) accept(tok int, grammar bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.c != nil {
		C.common_sampler_caccept(n.c, C.int32_t(tok), C.bool(grammar))
	}
}

func (n *nativeSampler) free() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.c != nil {
		C.common_sampler_cfree(n.c)
		n.c = nil
	}
}

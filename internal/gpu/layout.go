package gpu

import (
	"fmt"
	"reflect"
	"sync"
	"unsafe"

	"github.com/ollama/ollama/llama"
)

// The binding keeps its C handles in unexported fields, and this package reaches two of them
// through unsafe: the llama_context pointer of llama.Context (freeContext) and the
// llama_context_params struct inside llama.ContextParams (setContextFlags, via the mirror
// cContextParams). bindingLayout checks both against the binding's own types with reflect, which
// sees unexported fields and the cgo-generated C struct (names and offsets of its fields), so a
// binding upgrade that moves a field is refused instead of writing into the wrong memory.

// fieldWant is one field a layout guard expects: its name in the binding's type, the Go type
// name (cgo types are named _Ctype_...), and its offset.
type fieldWant struct {
	name   string
	typ    string // reflect.Type.String() of the field; "" to skip
	offset uintptr
}

// checkLayout reports the first difference between t and the expected size and fields.
func checkLayout(t reflect.Type, size uintptr, fields []fieldWant) error {
	if t.Kind() != reflect.Struct {
		return fmt.Errorf("%v is a %v, not a struct", t, t.Kind())
	}
	if t.Size() != size {
		return fmt.Errorf("%v is %d bytes, want %d", t, t.Size(), size)
	}
	for _, w := range fields {
		f, ok := t.FieldByName(w.name)
		if !ok {
			return fmt.Errorf("%v has no field %s", t, w.name)
		}
		if f.Offset != w.offset {
			return fmt.Errorf("%v.%s is at offset %d, want %d", t, w.name, f.Offset, w.offset)
		}
		if w.typ != "" && f.Type.String() != w.typ {
			return fmt.Errorf("%v.%s is a %v, want %s", t, w.name, f.Type, w.typ)
		}
	}
	return nil
}

// bindingLayout checks, once per process, every binding struct this package accesses through
// unsafe; nil when all match.
var bindingLayout = sync.OnceValue(func() error {
	// llama.Context: the C pointer is the first field.
	ctxT := reflect.TypeFor[llama.Context]()
	if err := checkLayout(ctxT, ctxT.Size(), []fieldWant{{"c", "*llama._Ctype_struct_llama_context", 0}}); err != nil {
		return fmt.Errorf("llama.Context layout: %w", err)
	}
	// llama.ContextParams wraps exactly the C struct, which cContextParams mirrors.
	var mirror cContextParams
	if err := checkLayout(reflect.TypeFor[llama.ContextParams](), unsafe.Sizeof(mirror),
		[]fieldWant{{"c", "llama._Ctype_struct_llama_context_params", 0}}); err != nil {
		return fmt.Errorf("llama.ContextParams layout: %w", err)
	}
	cT, _ := reflect.TypeFor[llama.ContextParams]().FieldByName("c")
	want := []fieldWant{
		{"n_ctx", "", unsafe.Offsetof(mirror.nCtx)},
		{"n_batch", "", unsafe.Offsetof(mirror.nBatch)},
		{"n_ubatch", "", unsafe.Offsetof(mirror.nUbatch)},
		{"n_seq_max", "", unsafe.Offsetof(mirror.nSeqMax)},
		{"n_threads", "", unsafe.Offsetof(mirror.nThreads)},
		{"n_threads_batch", "", unsafe.Offsetof(mirror.nThreadsBatch)},
		{"embeddings", "", unsafe.Offsetof(mirror.embeddings)},
		{"offload_kqv", "", unsafe.Offsetof(mirror.offloadKQV)},
		{"kv_unified", "", unsafe.Offsetof(mirror.kvUnified)},
	}
	if err := checkLayout(cT.Type, unsafe.Sizeof(mirror), want); err != nil {
		return fmt.Errorf("llama_context_params mirror: %w", err)
	}
	return nil
})

package gpu

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/ollama/ollama/fs/ggml"
	"github.com/ollama/ollama/llama"
	"github.com/ollama/ollama/ml"
	"go.uber.org/zap"
)

// backendInit runs llama_backend_init and loads the ggml backend libraries (CUDA) found next
// to the executable. Both are process-wide in llama.cpp, so they happen once per process.
var backendInit = sync.OnceFunc(llama.BackendInit)

// modelMeta is what Load learns from the GGUF header before llama.cpp sees the file.
type modelMeta struct {
	arch         string
	name         string
	chatTemplate string
	size         int64
}

// checkModelFile classifies a model file without loading its weights: missing, not a GGUF,
// truncated or malformed header/tensor table, unsupported architecture, larger than memory.
func checkModelFile(path string) (modelMeta, error) {
	var meta modelMeta
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return meta, loadErr(path, ErrModelNotFound, "no such file")
		}
		return meta, loadErr(path, ErrModelNotFound, "%v", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return meta, loadErr(path, ErrModelNotFound, "%v", err)
	}
	if st.IsDir() {
		return meta, loadErr(path, ErrNotGGUF, "is a directory")
	}
	meta.size = st.Size()
	var magic [4]byte
	if _, err := io.ReadFull(f, magic[:]); err != nil || !bytes.Equal(magic[:], []byte("GGUF")) {
		return meta, loadErr(path, ErrNotGGUF, "missing GGUF magic")
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return meta, loadErr(path, ErrCorruptModel, "%v", err)
	}
	g, err := ggml.Decode(f, 0)
	if err != nil {
		return meta, loadErr(path, ErrCorruptModel, "%v", err)
	}
	kv := g.KV()
	meta.arch = kv.Architecture()
	meta.name = kv.String("general.name")
	meta.chatTemplate = kv.ChatTemplate()
	if meta.arch == "" {
		return meta, loadErr(path, ErrUnsupportedArch, "no general.architecture")
	}
	if !generativeArchs[meta.arch] {
		return meta, loadErr(path, ErrUnsupportedArch, "%q cannot generate text with this llama.cpp", meta.arch)
	}
	if len(g.Tensors().Items()) == 0 {
		return meta, loadErr(path, ErrCorruptModel, "no tensors")
	}
	if avail, ok := memAvailable(); ok && uint64(meta.size) > avail {
		return meta, loadErr(path, ErrModelTooLarge, "file is %d MiB, MemAvailable is %d MiB", meta.size>>20, avail>>20)
	}
	return meta, nil
}

// memAvailable reads MemAvailable from /proc/meminfo (Linux); ok is false elsewhere.
func memAvailable() (uint64, bool) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemAvailable:" {
			kb, err := strconv.ParseUint(fields[1], 10, 64)
			return kb * 1024, err == nil
		}
	}
	return 0, false
}

// Load prepares the model named by cfg.Model (generating a dummy model when asked), creates
// the llama.cpp context and starts the scheduler. Every model error is a *LoadError naming
// the path and the reason. Close releases everything.
func Load(ctx context.Context, cfg Config, log *zap.Logger) (*Runner, error) {
	if log == nil {
		log = zap.NewNop()
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, &LoadError{Path: cfg.Model, Reason: ErrInvalidConfig, Detail: err.Error()}
	}
	path, name := cfg.Model, cfg.Model
	preset, isDummy, err := parseDummy(cfg.Model)
	if err != nil {
		return nil, &LoadError{Path: cfg.Model, Reason: ErrInvalidConfig, Detail: err.Error()}
	}
	if isDummy {
		name = "dummy:" + preset.name
		if path, err = ensureDummy(cfg.CacheDir, preset); err != nil {
			return nil, &LoadError{Path: cfg.CacheDir, Reason: ErrModelNotFound, Detail: err.Error()}
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("load model %q: %w", path, err)
	}
	meta, err := checkModelFile(path)
	if err != nil {
		return nil, err
	}
	backendInit()

	gpus := llama.EnumerateGPUs()
	useGPU := false
	switch cfg.Device {
	case "cuda":
		if len(gpus) == 0 {
			return nil, loadErr(path, ErrBackendUnavailable,
				"--device cuda but no CUDA device (is lib/ollama/libggml-cuda.so next to the binary and a GPU present? see scripts/build-cuda.sh)")
		}
		useGPU = true
	case "auto":
		useGPU = len(gpus) > 0
	}
	mp := llama.ModelParams{UseMmap: true}
	gpuLayers := 0
	if useGPU {
		gpuLayers = cfg.GPULayers
		if gpuLayers < 0 {
			gpuLayers = 999 // llama.cpp clamps to the layer count (+ output)
		}
		mp.NumGpuLayers = gpuLayers
		mp.Devices = []uint64{gpus[0].LlamaID}
	}
	model, err := llama.LoadModelFromFile(path, mp)
	if err != nil {
		return nil, loadErr(path, ErrCorruptModel, "llama.cpp could not load the weights (architecture %s; its log has details)", meta.arch)
	}
	cp := llama.NewContextParams(cfg.ContextSize, cfg.BatchSize, cfg.MaxSequences, cfg.Threads, ml.FlashAttentionAuto, "")
	unified := setContextFlags(&cp, cfg.ContextSize, cfg.MaxSequences, cfg.Threads)
	lctx, err := llama.NewContextWithModel(model, cp)
	if err != nil {
		llama.FreeModel(model)
		return nil, loadErr(path, ErrModelTooLarge, "could not create a context of %d cells for %d sequences: %v", cfg.ContextSize, cfg.MaxSequences, err)
	}
	if !unified {
		// Without a unified cache llama.cpp splits ContextSize evenly between sequences.
		per := cfg.ContextSize / cfg.MaxSequences
		log.Warn("llama.cpp context params layout unexpected; KV cache is per-sequence", zap.Int("cells_per_sequence", per))
		cfg.SeqContext = min(cfg.SeqContext, per)
	}
	r, err := newRunner(cfg, model, lctx, log)
	if err != nil {
		freeContext(lctx)
		llama.FreeModel(model)
		return nil, loadErr(path, ErrCorruptModel, "%v", err)
	}
	devices := []string{"CPU"}
	if useGPU {
		devices = []string{gpus[0].Library + " " + gpus[0].ID}
	}
	r.info = ModelInfo{
		Name: name, Path: path, Arch: meta.arch, VocabSize: model.NumVocab(),
		ContextSize: cfg.ContextSize, SeqContext: cfg.SeqContext,
		Backends: backendNames(), Devices: devices, GPULayers: gpuLayers,
		ChatFormat: chatFormatOf(meta.chatTemplate),
	}
	log.Info("model loaded", zap.String("model", name), zap.String("path", path), zap.String("arch", meta.arch),
		zap.Int("vocab", r.info.VocabSize), zap.Strings("backends", r.info.Backends),
		zap.Strings("all_devices", deviceNames()), zap.Strings("devices", devices), zap.Int("gpu_layers", gpuLayers),
		zap.Int("threads", cfg.Threads), zap.Int("context", cfg.ContextSize), zap.Int("max_sequences", cfg.MaxSequences),
		zap.Bool("unified_kv", unified), zap.String("chat_format", r.info.ChatFormat))
	return r, nil
}

// Info describes the loaded model and its devices.
func (r *Runner) Info() ModelInfo {
	info := r.info
	info.Backends = append([]string(nil), info.Backends...)
	info.Devices = append([]string(nil), info.Devices...)
	return info
}

// Tokenize turns text into tokens without BOS; special-token text (such as ChatML markers)
// becomes the special token, so prompts from ChatPrompt tokenize as the model expects.
func (r *Runner) Tokenize(text string) ([]int, error) {
	if text == "" {
		return nil, nil
	}
	toks, err := r.model.Tokenize(text, false, true)
	if err != nil {
		return nil, fmt.Errorf("tokenize: %w", err)
	}
	return toks, nil
}

// Detokenize renders tokens as text, leaving out BOS and end-of-generation tokens.
func (r *Runner) Detokenize(tokens []int) string {
	var b strings.Builder
	n := r.info.VocabSize
	for _, t := range tokens {
		if t < 0 || t >= n || t == r.bos || r.model.TokenIsEog(t) {
			continue
		}
		b.WriteString(r.model.TokenToPiece(t))
	}
	return b.String()
}

// CountTokens counts the tokens text takes as the first append of a sequence (BOS included when
// the model wants one). over reports text that cannot fit in limit tokens; a text longer than
// limit times the longest token is known to be over without tokenizing it, so a huge prompt
// costs nothing to refuse.
func (r *Runner) CountTokens(text string, limit int) (n int, over bool, err error) {
	if maxBytes := r.maxTokenBytes(); limit > 0 && len(text) > limit*maxBytes {
		return 0, true, nil
	}
	toks, err := r.Tokenize(text)
	if err != nil {
		return 0, false, err
	}
	n = len(toks)
	if r.addBOS && (n == 0 || toks[0] != r.bos) {
		n++
	}
	return n, limit > 0 && n > limit, nil
}

// maxTokenBytes is the longest text any one token stands for.
func (r *Runner) maxTokenBytes() int {
	r.maxPieceOnce.Do(func() {
		m := 1
		for i := range r.vocab {
			m = max(m, len(r.model.TokenToPiece(i)))
		}
		r.maxPiece = m
	})
	return r.maxPiece
}

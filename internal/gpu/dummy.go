package gpu

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/ollama/ollama/fs/ggml"
	"github.com/x448/float16"
)

// dummyVersion changes whenever the generator would write different bytes, so stale cache
// files are never reused.
const dummyVersion = 1

// dummySeed seeds every tensor; the model is a pure function of (preset, version, seed).
const dummySeed = 0x6f6d6e69 // "omni"

// dummyEOS is the dummy models' end-of-sequence token, </s> (dummyVocab's third token).
const dummyEOS = 2

// dummyPreset is the shape of one dummy model.
type dummyPreset struct {
	name              string
	embd, layers, ffn int
	heads, kvHeads    int
	ctx               int
	kind              ggml.TensorType // weight type of the matrices (norms stay f32)
	logitStd          float32         // spread of word logits; see outputRow
	// chatTemplate, when set, is written as tokenizer.chat_template, and controls are added to
	// the vocabulary as control tokens: GGUFs in another model family's prompt format, for
	// tests. The presets have neither.
	chatTemplate string
	controls     []string
}

var dummyPresets = map[string]dummyPreset{
	// tiny: fast tests; about 1 MiB.
	"tiny": {name: "tiny", embd: 64, layers: 2, ffn: 128, heads: 4, kvHeads: 2, ctx: 8192,
		kind: ggml.TensorTypeF32, logitStd: 4},
	// 0.6b: the compute of a 0.6B-parameter model (Qwen3-0.6B-like body: 28 layers of width
	// 1024), Q8_0, about 0.6 GiB. Its vocabulary is small, so the extra FFN width stands in
	// for the large output matrix of a real 0.6B model.
	"0.6b": {name: "0.6b", embd: 1024, layers: 28, ffn: 5632, heads: 16, kvHeads: 8, ctx: 32768,
		kind: ggml.TensorTypeQ8_0, logitStd: 4},
}

// parseDummy reports whether model names a dummy preset, and which.
func parseDummy(model string) (dummyPreset, bool, error) {
	if model != "dummy" && !strings.HasPrefix(model, "dummy:") {
		return dummyPreset{}, false, nil
	}
	name := strings.TrimPrefix(strings.TrimPrefix(model, "dummy"), ":")
	if name == "" {
		name = "tiny"
	}
	p, ok := dummyPresets[name]
	if !ok {
		return dummyPreset{}, true, fmt.Errorf("%w: unknown dummy preset %q (want tiny or 0.6b)", ErrInvalidConfig, name)
	}
	return p, true, nil
}

func (p dummyPreset) id() string {
	return fmt.Sprintf("omniserve-dummy preset=%s version=%d seed=%d", p.name, dummyVersion, dummySeed)
}

// ensureDummy returns the path of the preset's GGUF in dir, generating it when it is absent or
// not the expected file. Concurrent processes may both generate it; each writes a private temp
// file and renames it into place, so readers only ever see a complete file.
func ensureDummy(dir string, p dummyPreset) (string, error) {
	path := filepath.Join(dir, fmt.Sprintf("dummy-%s-v%d.gguf", p.name, dummyVersion))
	removeOrphanTemps(dir)
	if dummyValid(path, p) {
		return path, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("create cache dir: %w", err)
	}
	tmp, err := os.CreateTemp(dir, filepath.Base(path)+".tmp-*")
	if err != nil {
		return "", fmt.Errorf("create dummy model: %w", err)
	}
	defer os.Remove(tmp.Name()) // no-op after a successful rename
	// The lock marks the temp file as being written: removeOrphanTemps in another process skips
	// it. The kernel drops it when this process dies, however it dies.
	_ = syscall.Flock(int(tmp.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	kv, tensors := p.build()
	if err := ggml.WriteGGUF(tmp, kv, tensors); err != nil {
		tmp.Close()
		return "", fmt.Errorf("write dummy model %s: %w", tmp.Name(), err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return "", fmt.Errorf("sync dummy model: %w", err)
	}
	// Rename while the file is still open, so the lock covers it until it has its final name:
	// a concurrent removeOrphanTemps never sees it unlocked.
	if err := os.Rename(tmp.Name(), path); err != nil {
		tmp.Close()
		return "", fmt.Errorf("install dummy model: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("close dummy model: %w", err)
	}
	return path, nil
}

// removeOrphanTemps deletes the temp files of generations that died before their rename (a kill
// during start-up): a temp file nobody holds the write lock on is an orphan. Errors are
// ignored: an orphan costs disk space, not correctness. A temp file younger than a minute is
// left alone: its writer may not have taken the lock yet (CreateTemp, then Flock).
func removeOrphanTemps(dir string) {
	names, _ := filepath.Glob(filepath.Join(dir, "dummy-*.gguf.tmp-*"))
	for _, name := range names {
		if fi, err := os.Stat(name); err != nil || time.Since(fi.ModTime()) < time.Minute {
			continue
		}
		f, err := os.Open(name)
		if err != nil {
			continue
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
			_ = os.Remove(name)
		}
		f.Close()
	}
}

// dummyValid checks the identity key and that every tensor lies inside the file (Decode checks
// bounds), which catches truncated or foreign files cheaply without hashing 0.6 GiB.
func dummyValid(path string, p dummyPreset) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	g, err := ggml.Decode(f, 0)
	if err != nil {
		return false
	}
	return g.KV().String("general.omniserve_dummy") == p.id()
}

// dummyVocab builds the SentencePiece-style vocabulary: specials, 256 byte tokens (so any
// text tokenizes; llama.cpp throws on a byte it cannot map), "▁" prefixes of every word
// (SPM merges only through pieces that exist), and the words themselves.
func dummyVocab() (tokens []string, scores []float32, types []int32, isWord []bool) {
	add := func(tok string, score float32, typ int32, word bool) {
		tokens = append(tokens, tok)
		scores = append(scores, score)
		types = append(types, typ)
		isWord = append(isWord, word)
	}
	const normal, unknown, control, byteTok = 1, 2, 3, 6
	add("<unk>", 0, unknown, false)
	add("<s>", 0, control, false)
	add("</s>", 0, control, false)
	for b := range 256 {
		add(fmt.Sprintf("<0x%02X>", b), 0, byteTok, false)
	}
	seen := map[string]int{}
	for i, t := range tokens {
		seen[t] = i
	}
	// Single characters that appear in words, so prefixes can start from them.
	for _, c := range "▁abcdefghijklmnopqrstuvwxyz" {
		seen[string(c)] = len(tokens)
		add(string(c), -1000, normal, false)
	}
	for _, w := range dummyWords {
		if _, dup := seen["▁"+w]; dup && isWord[seen["▁"+w]] {
			continue
		}
		for k := 1; k < len(w); k++ {
			piece := "▁" + w[:k]
			if _, ok := seen[piece]; !ok {
				seen[piece] = len(tokens)
				add(piece, -float32(len(piece)), normal, false)
			}
		}
		piece := "▁" + w
		if i, ok := seen[piece]; ok {
			isWord[i] = true
			continue
		}
		seen[piece] = len(tokens)
		add(piece, -float32(len(piece)), normal, true)
	}
	return tokens, scores, types, isWord
}

func (p dummyPreset) build() (ggml.KV, []*ggml.Tensor) {
	tokens, scores, types, isWord := dummyVocab()
	for _, c := range p.controls {
		tokens, scores, types, isWord = append(tokens, c), append(scores, 0), append(types, 3), append(isWord, false)
	}
	vocab := len(tokens)
	headDim := p.embd / p.heads
	fileType := uint32(0) // all f32
	if p.kind == ggml.TensorTypeQ8_0 {
		fileType = 7 // mostly Q8_0
	}
	kv := ggml.KV{
		"general.architecture":                   "llama",
		"general.name":                           "omniserve-dummy-" + p.name,
		"general.omniserve_dummy":                p.id(),
		"general.file_type":                      fileType,
		"llama.context_length":                   uint32(p.ctx),
		"llama.embedding_length":                 uint32(p.embd),
		"llama.block_count":                      uint32(p.layers),
		"llama.feed_forward_length":              uint32(p.ffn),
		"llama.attention.head_count":             uint32(p.heads),
		"llama.attention.head_count_kv":          uint32(p.kvHeads),
		"llama.attention.layer_norm_rms_epsilon": float32(1e-5),
		"llama.rope.dimension_count":             uint32(headDim),
		"llama.rope.freq_base":                   float32(10000),
		"llama.vocab_size":                       uint32(vocab),
		"tokenizer.ggml.model":                   "llama",
		"tokenizer.ggml.tokens":                  tokens,
		"tokenizer.ggml.scores":                  scores,
		"tokenizer.ggml.token_type":              types,
		"tokenizer.ggml.unknown_token_id":        uint32(0),
		"tokenizer.ggml.bos_token_id":            uint32(1),
		"tokenizer.ggml.eos_token_id":            uint32(dummyEOS),
		"tokenizer.ggml.add_bos_token":           true,
		"tokenizer.ggml.add_eos_token":           false,
	}
	if p.chatTemplate != "" {
		kv["tokenizer.chat_template"] = p.chatTemplate
	}
	e, kvd := uint64(p.embd), uint64(p.kvHeads*headDim)
	mat := func(name string, cols, rows uint64, std float32) *ggml.Tensor {
		return p.tensor(name, []uint64{cols, rows}, p.kind, std, nil)
	}
	wstd := func(fanIn uint64) float32 { return float32(1 / math.Sqrt(float64(fanIn))) }
	ts := []*ggml.Tensor{
		mat("token_embd.weight", e, uint64(vocab), 1),
		p.tensor("output_norm.weight", []uint64{e}, ggml.TensorTypeF32, 0, nil),
		// Only whole words get non-zero output rows: their logits spread with std logitStd
		// while prefixes, bytes and EOS sit at exactly 0, so sampling (top-k, or temperature
		// with this spread) practically always picks a speakable word. The weights never end a
		// reply; the sampling step does, at a drawn length (dummyend.go).
		p.tensor("output.weight", []uint64{e, uint64(vocab)}, p.kind, p.logitStd*wstd(e), isWord),
	}
	for l := range p.layers {
		b := fmt.Sprintf("blk.%d.", l)
		ts = append(ts,
			p.tensor(b+"attn_norm.weight", []uint64{e}, ggml.TensorTypeF32, 0, nil),
			p.tensor(b+"ffn_norm.weight", []uint64{e}, ggml.TensorTypeF32, 0, nil),
			mat(b+"attn_q.weight", e, e, wstd(e)),
			mat(b+"attn_k.weight", e, kvd, wstd(e)),
			mat(b+"attn_v.weight", e, kvd, wstd(e)),
			mat(b+"attn_output.weight", e, e, wstd(e)),
			mat(b+"ffn_gate.weight", e, uint64(p.ffn), wstd(e)),
			mat(b+"ffn_up.weight", e, uint64(p.ffn), wstd(e)),
			mat(b+"ffn_down.weight", uint64(p.ffn), e, wstd(uint64(p.ffn))),
		)
	}
	return kv, ts
}

// tensor returns a tensor whose data is generated while it is written. std 0 means all ones
// (norm weights). rowMask, when set, zeroes the rows whose entry is false.
func (p dummyPreset) tensor(name string, shape []uint64, kind ggml.TensorType, std float32, rowMask []bool) *ggml.Tensor {
	h := fnv.New64a()
	h.Write([]byte(name))
	var seed [32]byte
	binary.LittleEndian.PutUint64(seed[:], h.Sum64())
	binary.LittleEndian.PutUint64(seed[8:], dummySeed)
	binary.LittleEndian.PutUint64(seed[16:], uint64(dummyVersion))
	gen := &tensorGen{shape: shape, kind: kind, std: std, rowMask: rowMask, seed: seed}
	return &ggml.Tensor{Name: name, Kind: uint32(kind), Shape: shape, WriterTo: gen}
}

type tensorGen struct {
	shape   []uint64
	kind    ggml.TensorType
	std     float32
	rowMask []bool
	seed    [32]byte
}

// WriteTo streams the tensor row by row: uniform values with the requested standard deviation.
func (g *tensorGen) WriteTo(w io.Writer) (int64, error) {
	cols := int(g.shape[0])
	rows := 1
	for _, d := range g.shape[1:] {
		rows *= int(d)
	}
	rng := rand.NewChaCha8(g.seed)
	var rowBytes int
	switch g.kind {
	case ggml.TensorTypeF32:
		rowBytes = cols * 4
	case ggml.TensorTypeQ8_0:
		if cols%32 != 0 {
			return 0, fmt.Errorf("q8_0 row length %d not a multiple of 32", cols)
		}
		rowBytes = cols / 32 * 34
	default:
		return 0, errors.New("unsupported dummy tensor type")
	}
	// Uniform on [-a, a] has standard deviation a/sqrt(3).
	amp := g.std * float32(math.Sqrt(3))
	raw := make([]byte, cols)
	buf := make([]byte, 0, rowBytes*64)
	var n int64
	flush := func() error {
		m, err := w.Write(buf)
		n += int64(m)
		buf = buf[:0]
		return err
	}
	for r := range rows {
		zero := g.rowMask != nil && !g.rowMask[r]
		_, _ = rng.Read(raw)
		switch g.kind {
		case ggml.TensorTypeF32:
			for c := range cols {
				v := float32(1)
				if g.std != 0 {
					v = amp * float32(int8(raw[c])) / 128
				}
				if zero {
					v = 0
				}
				buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(v))
			}
		case ggml.TensorTypeQ8_0:
			d := float16.Fromfloat32(amp / 127)
			if zero {
				d = 0
			}
			for b := 0; b < cols; b += 32 {
				buf = binary.LittleEndian.AppendUint16(buf, uint16(d))
				for _, q := range raw[b : b+32] {
					if q == 0x80 { // -128 would skew the symmetric range
						q = 0x81
					}
					if zero {
						q = 0
					}
					buf = append(buf, q)
				}
			}
		}
		if len(buf)+rowBytes > cap(buf) {
			if err := flush(); err != nil {
				return n, err
			}
		}
	}
	return n, flush()
}

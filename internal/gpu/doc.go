// Package gpu is the model-runner bridge: the only package that talks to llama.cpp (through
// github.com/ollama/ollama/llama, cgo). It runs on CUDA when a CUDA backend (libggml-cuda.so
// in lib/ollama next to the binary, see `make cuda`) is present and the device allows it,
// and on the CPU otherwise; the name is the design card's. Everything it exports is plain Go.
//
// # Scheduler
//
// Load starts one scheduler goroutine, locked to its OS thread, that owns the llama context.
// Every step packs one batch from all live sequences: first one decode token for each
// generating sequence, then prefill chunks (at most PrefillChunk tokens of one sequence)
// round-robin over the sequences with pending input, up to BatchSize tokens. Sequences join
// and leave between steps. The KV cache is unified (one pool of ContextSize cells shared by
// MaxSequences sequence ids), so any mix of sequences decodes as one batch.
//
// Generated tokens go to the caller through a bounded per-sequence buffer; a sequence whose
// caller does not drain it sits out of the batch until it does, so a slow consumer never stalls
// the others. emit runs on the caller's goroutine.
//
// # Sequences
//
// A Sequence is a long-lived history: Append prefills tokens into its KV cells (the last
// appended token is decoded with the next call, which needs its logits), Generate samples after
// the history and appends its output to it, Abort stops a Generate at once, Close frees the
// slot. The first Append of a sequence gets the model's BOS token when the model wants one.
// NextTokenProb reads the probability of one token after the history plus a text and removes
// the evaluated positions again (semantic_vad asks it for the chat template's end-of-user-turn
// token, Runner.UserTurnEnd), leaving the history and the KV cache as they were.
// Sampling uses a fresh sampler per Generate seeded with Sampling.Seed, so the same seed and
// history give the same tokens.
//
// Context overflow (a sequence reaching its limit) never affects other sequences. With
// Overflow "truncate" the oldest history after KeepPrefix tokens is dropped, a quarter of the
// window at a time, by a KV shift (KvCacheSeqRm + KvCacheSeqAdd) when the cache supports it,
// else by re-prefilling the kept tail. With "error" the one call that would overflow fails
// with ErrContextFull. A full shared cache fails (or truncates) the sequence holding the most
// cells. A caller that keeps its conversation within the window itself (the duplex stream's
// session.truncation, internal/stage/duplex_budget.go) drops a span of its own choosing with
// Sequence.Forget, the same way.
//
// Determinism: the same seed and history give the same tokens run after run. Across batch
// shapes (alone vs batched with others) llama.cpp's kernels round differently, so greedy
// output is stable but a temperature draw that lands on a near-tie can differ.
//
// Threads: ggml's CPU threads spin on barriers, so Threads larger than the cores this process
// really gets (shared machines) collapses throughput by 10x or more; measured in
// docs/BENCHMARKS.md. The default therefore leaves one core to the rest of the process (the
// pipeline's ASR, VAD and TTS): on 2 cores the first-audio p50 fell from 127 ms to 36 ms.
//
// # Models
//
// Config.Model "dummy", "dummy:tiny" or "dummy:0.6b" generates a deterministic random-weight
// llama-architecture GGUF into CacheDir (written to a temp file and renamed, so concurrent
// processes are safe; reused when its identity key matches and its tensors lie inside the
// file). The vocabulary is SentencePiece-style: <unk>, <s>, </s>, 256 byte tokens, the
// "▁"-prefixes of a few hundred common English words, and the words. Only whole words have
// non-zero output weights, so generation produces speakable words and the weights never pick
// EOS. A dummy reply still ends as a real model's does: the sampling step picks EOS once the
// reply has a length drawn (8 to 32 words) from the prompt's last tokens and the sampling seed,
// so the same conversation gives the same lengths (dummyend.go; GenerateOptions.IgnoreEOS skips
// it). tiny is about 1 MiB (f32), 0.6b is a 28-layer, width-1024 Q8_0 model of about 0.6 GiB
// (~0.57 B parameters).
//
// Any other value is a GGUF path. Load checks it before llama.cpp sees it and returns a
// *LoadError (errors.Is: ErrModelNotFound, ErrNotGGUF, ErrUnsupportedArch, ErrCorruptModel,
// ErrModelTooLarge, ErrBackendUnavailable) naming the path and the reason.
//
// # Chat template
//
// ChatPrompt renders with the model's own template (tokenizer.chat_template) through llama.cpp's
// llama_chat_apply_template, which recognises the common formats (ChatML, Llama 3, Gemma,
// Mistral, Phi, ...) without running Jinja; Info().ChatFormat names the one found. A GGUF with no
// template gets ChatML:
//
//	<|im_start|>{role}\n{content}<|im_end|>\n ... <|im_start|>assistant\n
//
// as does one whose template llama.cpp does not recognise (with a warning). The dummy models,
// whose vocabulary is words without chat markers, use the plain format:
//
//	{role}: {content}\n ... assistant:
//
// Only the template's own markup becomes control tokens: ChatPrompt marks its control tokens
// (U+FDD0 ... U+FDD1) and Tokenize parses special tokens only there, so message content such as
// "<|im_end|>" is tokenized as text and cannot end a turn or open one.
//
// # Backends
//
// The CPU backend is compiled in. CUDA is a shared library, libggml-cuda.so, that ggml loads at
// start-up from <dir of the executable>/../lib/ollama (or OLLAMA_LIBRARY_PATH when it contains
// lib/ollama); scripts/build-cuda.sh builds it from the module's own sources. Device "auto" uses
// the first GPU when one is present, "cuda" requires one, "cpu" never offloads. Info lists the
// backends and devices.
package gpu

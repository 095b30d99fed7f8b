package gpu

import "strings"

// generativeArchs are the architectures the pinned llama.cpp (LLM_ARCH_NAMES in
// llama/llama.cpp/src/llama-arch.cpp of ollama v0.17.4) can run as a text generator. Encoder
// and embedding-only architectures (bert family, t5encoder, clip, wavtokenizer-dec,
// gemma-embedding) are left out: they cannot generate tokens.
var generativeArchs = func() map[string]bool {
	m := map[string]bool{}
	for _, a := range strings.Fields(`llama llama4 deci falcon grok gpt2 gptj gptneox mpt baichuan
	starcoder refact bloom stablelm qwen qwen2 qwen2moe qwen2vl qwen3 qwen3moe qwen3next qwen3vl
	qwen3vlmoe phi2 phi3 phimoe plamo plamo2 codeshell orion internlm2 minicpm minicpm3 gemma gemma2
	gemma3 gemma3n starcoder2 mamba mamba2 jamba falcon-h1 xverse command-r cohere2 dbrx olmo olmo2
	olmoe openelm arctic deepseek deepseek2 chatglm glm4 glm4moe bitnet t5 jais nemotron nemotron_h
	nemotron_h_moe exaone exaone4 rwkv6 rwkv6qwen2 rwkv7 arwkv7 granite granitemoe granitehybrid
	chameleon solar plm bailingmoe bailingmoe2 dots1 arcee afmoe ernie4_5 ernie4_5-moe hunyuan-moe
	hunyuan-dense smollm3 gpt-oss lfm2 lfm2moe dream smallthinker llada llada-moe seed_oss grovemoe
	apertus minimax-m2 cogvlm rnd1 pangu-embedded mistral3`) {
		m[a] = true
	}
	return m
}()

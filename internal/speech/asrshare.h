// Sharing of read-only pocketsphinx model data between decoders (see asrshare.c).
#ifndef OMNI_ASRSHARE_H
#define OMNI_ASRSHARE_H

#include <pocketsphinx.h>
#include <sphinxbase/ngram_model.h>

// omni_asr_shared holds what every decoder of one ASR pool shares: the n-gram language model
// (scored through per-decoder shallow clones), the pronunciation dictionary and its triphone
// mapping. All functions that take it must be called with the pool's library lock held:
// sphinxbase's reference counts are plain ints.
typedef struct omni_asr_shared_s omni_asr_shared_t;

// omni_dec is one decoder and the LM clone it scores with (NULL when it owns its LM).
typedef struct omni_dec_s {
	ps_decoder_t *ps;
	ngram_model_t *lm;
	// cmn0 is the live cepstral mean the decoder started with (NULL until its first utterance,
	// or when it normalizes in batch): every utterance starts from it (omni_dec_start_utt).
	mfcc_t *cmn0;
	int cmn0type; // the normalisation it started with (the library turns batch into live after one utterance)
} omni_dec_t;

// omni_dec_start_utt starts an utterance from the decoder's initial state: live cepstral mean
// normalisation adapts to each utterance's audio, and a pooled decoder would otherwise carry
// one request's adaptation into the next, so the same audio could give different words.
int omni_dec_start_utt(omni_dec_t *d);

// omni_asr_lm_vocab loads the LM at path and returns its word list, one word per line, in a
// malloc'd string the caller frees (NULL on failure).
char *omni_asr_lm_vocab(const char *lm);

// omni_asr_shared_new builds the first decoder with dict (a dictionary file) and the LM at lm,
// and keeps the parts later decoders share. *why is set to a static reason when sharing was
// refused after the layout checks (the returned decoder then owns its LM; the caller falls back
// to unshared decoders) and to NULL when it is on. Returns NULL on failure.
omni_asr_shared_t *omni_asr_shared_new(const char *hmm, const char *dict, const char *lm,
                                       omni_dec_t *first, const char **why);

// omni_asr_dec_new builds a decoder: on the shared model when s is not NULL (dict and lm are
// then unused), otherwise with its own dictionary and LM. Returns 0, or -1 on failure.
int omni_asr_dec_new(omni_asr_shared_t *s, const char *hmm, const char *dict, const char *lm,
                     omni_dec_t *out);

// omni_asr_dec_free frees a decoder and its LM clone.
void omni_asr_dec_free(omni_dec_t *d);

// omni_asr_shared_free drops the pool's references; decoders still alive keep what they use.
void omni_asr_shared_free(omni_asr_shared_t *s);

#endif

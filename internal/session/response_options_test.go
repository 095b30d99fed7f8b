package session

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestValidRole(t *testing.T) {
	for _, tc := range []struct {
		role string
		want bool
	}{
		{"user", true}, {"system", true}, {"assistant", true},
		{"", false}, {"tool", false}, {"User", false},
	} {
		require.Equal(t, tc.want, validRole(tc.role), tc.role)
	}
}

func TestWantsAudio(t *testing.T) {
	for _, tc := range []struct {
		name       string
		modalities []string
		audio      bool
		errMsg     string
	}{
		{"audio", []string{"audio"}, true, ""},
		{"text", []string{"text"}, false, ""},
		{"both", []string{"text", "audio"}, true, ""},
		{"empty", []string{}, false, "at least one modality is required"},
		{"unknown", []string{"audio", "video"}, false, `unsupported modality "video"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			audio, fe := wantsAudio(tc.modalities)
			if tc.errMsg != "" {
				require.NotNil(t, fe)
				require.Equal(t, "response.output_modalities", fe.Param)
				require.Equal(t, tc.errMsg, fe.Message)
				return
			}
			require.Nil(t, fe)
			require.Equal(t, tc.audio, audio)
		})
	}
}

func TestCheckMetadata(t *testing.T) {
	many := map[string]string{}
	for i := 0; i < 17; i++ {
		many[string(rune('a'+i))] = "v"
	}
	for _, tc := range []struct {
		name     string
		metadata map[string]string
		ok       bool
	}{
		{"nil", nil, true},
		{"small", map[string]string{"k": "v"}, true},
		{"longest key and value", map[string]string{strings.Repeat("k", 64): strings.Repeat("v", 512)}, true},
		{"key too long", map[string]string{strings.Repeat("k", 65): "v"}, false},
		{"value too long", map[string]string{"k": strings.Repeat("v", 513)}, false},
		{"17 pairs", many, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fe := checkMetadata(tc.metadata)
			if tc.ok {
				require.Nil(t, fe)
				return
			}
			require.NotNil(t, fe)
			require.Equal(t, "response.metadata", fe.Param)
		})
	}
}

package metrics

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// #1 test_is_duplex_resource_request_id_matches_engine_format.
func TestIsDuplexResourceRequestID(t *testing.T) {
	t.Parallel()
	rid := DuplexResourceRequestID("sid-1", 0, 0, "stage0")
	require.Equal(t, "duplex-s.c2lkLTE.i.0.e.0.r.stage0", rid)
	tests := []struct {
		rid  string
		want bool
	}{
		{rid, true},
		{DuplexResourceRequestID("duplex-6f1d2c3b-aaaa-bbbb-cccc-1234567890ab", 3, 12, "stage0"), true},
		{DuplexResourceRequestID("sid", 0, 1, "stage1-turn_2"), true},
		{"chatcmpl-abc", false},
		{"duplex-sid-e0-stage0", false},
		{"", false},
		{"duplex-s.c2lkLTE.e.0.r.stage0", false},                   // 6-part later format
		{"duplex-s.c2lkLTE.i.x.e.0.r.stage0", false},               // integers are validated
		{"duplex-s.c2lkLTE.i.0.e.-1.r.stage0", false},              // non-negative
		{"duplex-s.c2lkLTE.i.0.e.0.r.st/age", false},               // role charset
		{"duplex-s.c2lkLTE.j.0.e.0.r.stage0", false},               // part markers
		{"duplex-s..i.0.e.0.r.stage0", false},                      // empty session
		{"duplex-s.c2lkLTE.i.0.e.0.r.stage0.extra", false},         // 9 parts
		{"duplex-s.!!!.i.0.e.0.r.stage0", false},                   // not base64url
		{"duplex-s.c2lkLTE.i.01.e.0.r.stage0", false},              // canonical ints only
		{"duplex-s.c2lkLTE.i.0.e.0.r.", false},                     // empty role
		{"xduplex-s.c2lkLTE.i.0.e.0.r.stage0", false},              // prefix
		{"duplex-s.c2lkLTE.i.0.e.99999999999999999999.r.s", false}, // overflow
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, IsDuplexResourceRequestID(tt.rid), tt.rid)
	}
	id, ok := parseDuplexResourceRequestID(DuplexResourceRequestID("sid.with.dots", 2, 7, "stage0"))
	require.True(t, ok)
	require.Equal(t, duplexResourceID{SessionID: "sid.with.dots", Incarnation: 2, Epoch: 7, Role: "stage0"}, id)
}

// #5 test_finished_reason_for_cancel_mapping, plus two deliberate differences from the reference:
// server-VAD barge-in (turn_detected) logs as barge_in, and an engine error as error.
func TestFinishedReasonForCancel(t *testing.T) {
	t.Parallel()
	tests := map[string]string{
		"barge_in":                  ReasonBargeIn,
		"turn_detected":             ReasonBargeIn, // the reference logs cancel, hiding real barge-ins
		"session_close":             ReasonClose,
		"disconnect":                ReasonClose,
		"disconnect_grace_expired":  ReasonClose,
		"lease_expired":             ReasonClose,
		"timeout":                   ReasonCancel,
		"new_response":              ReasonCancel,
		"output_audio_buffer_clear": ReasonCancel,
		"client_cancelled":          ReasonCancel,
		"input.cancel":              ReasonCancel,
		"response.cancel":           ReasonCancel,
		"cancel":                    ReasonCancel,
		"engine_error":              ReasonError, // the reference ends these as stop, like a normal turn
		"error":                     ReasonError,
		"stop":                      ReasonStop,
		"close":                     ReasonClose,
		"abort":                     ReasonAbort,
		"something_else":            ReasonCancel,
		"":                          ReasonCancel,
	}
	for src, want := range tests {
		require.Equal(t, want, FinishedReasonForCancel(src), src)
	}
}

func TestNormalizeFinishedReason(t *testing.T) {
	t.Parallel()
	// length passes through: a truncated turn logs length, as chat does (docs/STATS.md).
	for _, r := range []string{"stop", "length", "barge_in", "cancel", "close", "abort", "error"} {
		require.Equal(t, r, NormalizeFinishedReason(r))
	}
	for _, r := range []string{"oops", "", "STOP"} {
		require.Equal(t, ReasonAbort, NormalizeFinishedReason(r), r)
	}
}

// FuzzDuplexResourceRequestID: every id we make parses back to its parts, and the predicate
// never accepts a string that does not round-trip.
func FuzzDuplexResourceRequestID(f *testing.F) {
	f.Add("sid-1", 0, 0, "stage0", "duplex-s.c2lkLTE.i.0.e.0.r.stage0")
	f.Add("duplex-6f1d2c3b", 3, 12, "stage1-turn_2", "chatcmpl-abc")
	f.Add("0", 0, 0, "0", "duplex-s.0A\n.i.0.e.0.r.0") // found by the fuzzer: \n was skipped
	f.Add("0", 0, 0, "0", "duplex-s.MA\r.i.0.e.0.r.0")
	f.Fuzz(func(t *testing.T, sid string, inc, epoch int, role, raw string) {
		if sid == "" || inc < 0 || epoch < 0 || !validRole(role) {
			return
		}
		rid := DuplexResourceRequestID(sid, inc, epoch, role)
		id, ok := parseDuplexResourceRequestID(rid)
		require.True(t, ok, rid)
		require.Equal(t, duplexResourceID{SessionID: sid, Incarnation: inc, Epoch: epoch, Role: role}, id)
		if p, ok := parseDuplexResourceRequestID(raw); ok {
			require.Equal(t, raw, DuplexResourceRequestID(p.SessionID, p.Incarnation, p.Epoch, p.Role))
		}
	})
}

package realtime_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/pion/webrtc/v4"
	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/realtime"
	"github.com/omniserve/omniserve/internal/session"
)

// callsWith is a calls server with the transport's configuration cfg.
func callsWith(t *testing.T, cfg realtime.CallsConfig) (string, *realtime.Calls) {
	t.Helper()
	s := newCallsServerWith(t, session.ManagerConfig{MaxOutputLead: 200 * time.Millisecond, ModelName: "dummy"},
		realtime.HandlerConfig{}, cfg, getFixture(t).backend, nil)
	return s.url, s.calls
}

// multipartOffer is the API-key form of a call request: the offer and a session.
func multipartOffer(sdp string) (ctype, body string) {
	return "multipart/form-data; boundary=b", "--b\r\nContent-Disposition: form-data; name=\"sdp\"\r\n\r\n" + sdp +
		"\r\n--b\r\nContent-Disposition: form-data; name=\"session\"\r\n\r\n{\"type\":\"realtime\"}\r\n--b--\r\n"
}

var candidateRE = regexp.MustCompile(`(?m)^a=candidate:\S+ \d+ (\w+) \d+ (\S+) (\d+) typ host(?: tcptype (\w+))?`)

// TestCallICETCP: with ICE-TCP on, the answer offers a passive TCP candidate on the configured
// port next to the UDP ones, and a peer that can only use TCP connects and gets
// session.created on the data channel.
func TestCallICETCP(t *testing.T) {
	t.Parallel()
	url, calls := callsWith(t, realtime.CallsConfig{ICETCP: true})
	require.Positive(t, calls.TCPPort())

	var se webrtc.SettingEngine
	se.SetNetworkTypes([]webrtc.NetworkType{webrtc.NetworkTypeTCP4})
	se.SetIncludeLoopbackCandidate(true)
	pc, err := webrtc.NewAPI(webrtc.WithSettingEngine(se)).NewPeerConnection(webrtc.Configuration{})
	require.NoError(t, err)
	defer pc.Close()
	_, err = pc.AddTransceiverFromKind(webrtc.RTPCodecTypeAudio, webrtc.RTPTransceiverInit{Direction: webrtc.RTPTransceiverDirectionSendrecv})
	require.NoError(t, err)
	dc, err := pc.CreateDataChannel("oai-events", nil)
	require.NoError(t, err)
	created := make(chan struct{})
	dc.OnMessage(func(m webrtc.DataChannelMessage) {
		var ev struct{ Type string }
		if json.Unmarshal(m.Data, &ev) == nil && ev.Type == "session.created" {
			select {
			case <-created:
			default:
				close(created)
			}
		}
	})
	offer, err := pc.CreateOffer(nil)
	require.NoError(t, err)
	gathered := webrtc.GatheringCompletePromise(pc)
	require.NoError(t, pc.SetLocalDescription(offer))
	<-gathered
	ctype, body := multipartOffer(pc.LocalDescription().SDP)
	resp, answer := post(t, url, ctype, body)
	require.Equal(t, http.StatusCreated, resp.StatusCode, string(answer))

	var tcp, udp int
	for _, m := range candidateRE.FindAllStringSubmatch(string(answer), -1) {
		switch m[1] {
		case "tcp":
			require.Equal(t, "passive", m[4], m[0])
			require.Equal(t, fmt.Sprint(calls.TCPPort()), m[3], m[0])
			tcp++
		case "udp":
			require.Equal(t, fmt.Sprint(calls.Port()), m[3], m[0])
			udp++
		}
	}
	require.Positive(t, tcp, "no ICE-TCP candidate in the answer:\n%s", answer)
	require.Positive(t, udp, "UDP candidates stay:\n%s", answer)

	require.NoError(t, pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeAnswer, SDP: string(answer)}))
	select {
	case <-created:
	case <-time.After(30 * time.Second):
		t.Fatalf("a TCP-only peer got no session.created (ICE state %s)", pc.ICEConnectionState())
	}
	pair, err := pc.SCTP().Transport().ICETransport().GetSelectedCandidatePair()
	require.NoError(t, err)
	require.Equal(t, webrtc.ICEProtocolTCP, pair.Local.Protocol, "the call runs over TCP")
}

// TestCallInterfaceFilter: with Interfaces set, only those interfaces' addresses are announced
// (here the loopback one), and without ICE-TCP no TCP candidate is.
func TestCallInterfaceFilter(t *testing.T) {
	t.Parallel()
	url, _ := callsWith(t, realtime.CallsConfig{Interfaces: []string{"lo"}})
	ctype, body := multipartOffer(audioOffer(t))
	resp, answer := post(t, url, ctype, body)
	require.Equal(t, http.StatusCreated, resp.StatusCode, string(answer))
	cands := candidateRE.FindAllStringSubmatch(string(answer), -1)
	require.NotEmpty(t, cands, string(answer))
	for _, m := range cands {
		require.Equal(t, "udp", m[1], m[0])
		require.Equal(t, "127.0.0.1", m[2], "only the loopback interface is announced: %s", m[0])
	}
}

// TestCallPublicIPsRewriteTCP: behind a NAT 1:1 the announced address is the public one for
// the TCP candidates too.
func TestCallPublicIPsRewriteTCP(t *testing.T) {
	t.Parallel()
	url, _ := callsWith(t, realtime.CallsConfig{ICETCP: true, PublicIPs: []string{"203.0.113.7"}})
	ctype, body := multipartOffer(audioOffer(t))
	resp, answer := post(t, url, ctype, body)
	require.Equal(t, http.StatusCreated, resp.StatusCode, string(answer))
	seen := map[string]bool{}
	for _, m := range candidateRE.FindAllStringSubmatch(string(answer), -1) {
		require.Equal(t, "203.0.113.7", m[2], m[0])
		seen[m[1]] = true
	}
	require.Equal(t, map[string]bool{"udp": true, "tcp": true}, seen, string(answer))
}

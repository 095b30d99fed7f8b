package realtime

import (
	"context"
	"crypto/tls"
	"net"
)

// sendBufferBytes is the kernel send buffer of a realtime connection. Left to autotuning it
// grows to megabytes, which hold tens of seconds of paced audio for a client that stopped
// reading; small, the backlog stays in the outbound queue, where its age is watched.
const sendBufferBytes = 64 << 10

type netConnKey struct{}

// ConnContext is an http.Server ConnContext that lets the realtime handler reach the
// connection it upgrades (to size its send buffer).
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, netConnKey{}, c)
}

// limitSendBuffer sizes the send buffer of the request's TCP connection, when the server
// stored it (ConnContext); other transports are left alone.
func limitSendBuffer(ctx context.Context) {
	c, _ := ctx.Value(netConnKey{}).(net.Conn)
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	if tcp, ok := c.(*net.TCPConn); ok {
		_ = tcp.SetWriteBuffer(sendBufferBytes) // best effort: the stall timeout does not depend on it
	}
}

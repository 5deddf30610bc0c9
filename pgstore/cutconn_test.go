package pgstore

import (
	"encoding/binary"
	"net"
	"testing"

	"github.com/stretchr/testify/require"
)

// enteredConn tells when a Read has begun waiting on the connection.
type enteredConn struct {
	net.Conn
	entered chan struct{}
}

func (c *enteredConn) Read(p []byte) (int, error) {
	select {
	case c.entered <- struct{}{}:
	default:
	}
	return c.Conn.Read(p)
}

// backendMessage frames one message the server sends.
func backendMessage(typ byte, body string) []byte {
	msg := []byte{typ, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(msg[1:], uint32(4+len(body)))
	return append(msg, body...)
}

// The fault tests' cutConn loses the answer to a COMMIT even when the
// Read that receives it began before the test set the mode, as pgconn's
// background reader does when a write is slow: such a Read let the
// answer through, and the cut then hit the next call's statement on a
// connection back in the pool.
func TestCutConnFiltersAReadBegunBeforeTheMode(t *testing.T) {
	for _, pooler := range []bool{false, true} {
		client, server := net.Pipe()
		t.Cleanup(func() { _ = client.Close(); _ = server.Close() })
		under := &enteredConn{Conn: client, entered: make(chan struct{}, 1)}
		c := &cutConn{Conn: under}
		type read struct {
			b   []byte
			err error
		}
		got := make(chan read, 1)
		go func() {
			buf := make([]byte, 1024)
			n, err := c.Read(buf)
			got <- read{buf[:n], err}
		}()
		<-under.entered // the Read waits, with no mode set
		c.pooler.Store(pooler)
		c.mode.Store(int32(cutReply))
		answer := append(backendMessage('C', "COMMIT\x00"), backendMessage('Z', "I")...)
		_, err := server.Write(answer)
		require.NoError(t, err)
		r := <-got
		require.True(t, c.landed.Load(), "the COMMIT was answered")
		require.True(t, c.cut.Load())
		if pooler {
			require.NoError(t, r.err)
			require.Equal(t, poolerError, r.b, "the client reads the pooler's error, not the answer")
		} else {
			require.ErrorIs(t, r.err, errConnectionCut, "the client reads a lost connection, not the answer")
		}
		_, err = c.Read(make([]byte, 16))
		require.ErrorIs(t, err, errConnectionCut, "then the connection is lost")
	}
}

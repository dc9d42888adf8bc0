// Command goyamux is the Go side of devyard's interop tests and of `python -m bench mux`.
//
// It is one program with modes, so that one offline build (GOPATH mode, Debian's golang-go and
// golang-github-hashicorp-yamux-dev) serves every use:
//
//	peer (-listen ADDR | -dial ADDR)   interop peer: a hashicorp/yamux session driven by stdin
//	sink -listen ADDR                  far end of every bench path
//	client                             bench load client driven by stdin, one JSON line per command
//	entry -listen ADDR -carrier ADDR   go_yamux bench path: yamux client over one TCP carrier
//	exit -listen ADDR -sink ADDR       go_yamux bench path: yamux server that dials the sink
//
// Every listening mode prints "LISTEN host:port" on stdout once it is bound. With -lifeline,
// sink, entry and exit exit when their stdin reaches EOF, so a harness that dies without
// cleaning up (SIGKILL) does not leave them listening: its end of the pipe closes with it.
//
// Note on half-close: in the yamux snapshot Debian ships (2019), Stream.Close sends FIN, but a
// Read after a local Close returns io.EOF as soon as the receive buffer is momentarily empty.
// So the interop peer never reads after its own Close, and the bench load never relies on
// data flowing toward a side that already half-closed.
package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/yamux"
)

// ioBuffer is _CHUNK of devyard/core/splice.py (1 MiB): every path copies in pieces of one size.
const ioBuffer = 1 << 20

var outMu sync.Mutex

// say writes one line to stdout; lines are the protocol with the Python side.
func say(format string, args ...interface{}) {
	outMu.Lock()
	defer outMu.Unlock()
	fmt.Fprintf(os.Stdout, format+"\n", args...)
}

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "goyamux: "+format+"\n", args...)
	os.Exit(2)
}

func main() {
	if len(os.Args) < 2 {
		fail("usage: goyamux peer|sink|client|entry|exit [flags]")
	}
	mode, args := os.Args[1], os.Args[2:]
	switch mode {
	case "peer":
		runPeer(args)
	case "sink":
		runSink(args)
	case "client":
		runClient(args)
	case "entry":
		runEntry(args)
	case "exit":
		runExit(args)
	default:
		fail("unknown mode %q", mode)
	}
}

func listen(addr string) net.Listener {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fail("listen %s: %v", addr, err)
	}
	say("LISTEN %s", ln.Addr().String())
	return ln
}

// lifeline exits the process when stdin reaches EOF (the parent's end of the pipe closed).
func lifeline(fs *flag.FlagSet) *bool {
	return fs.Bool("lifeline", false, "exit when stdin reaches EOF")
}

func watchLifeline(on *bool) {
	if !*on {
		return
	}
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}()
}

func yamuxConfig(quiet bool) *yamux.Config {
	cfg := yamux.DefaultConfig()
	if quiet {
		cfg.LogOutput = io.Discard
	}
	return cfg
}

// tunnelWindow is the go_yamux path's MaxStreamWindowSize: the largest window devyard's core
// grows a stream to (SessionConfig.max_window). This yamux snapshot never grows a window past
// MaxStreamWindowSize, whose default (256 KiB) capped a stream at about 3 Gbit/s on the
// loaded 2-core development machine where 4 MiB reached 4.5-5; a user who tunnels bulk data
// raises it, and the comparison is then like for like.
const tunnelWindow = 4 << 20

func tunnelConfig() *yamux.Config {
	cfg := yamuxConfig(true)
	cfg.MaxStreamWindowSize = tunnelWindow
	return cfg
}

// ---- interop peer ----------------------------------------------------------------------------

// pattern is the payload of Go-opened streams: byte j is j % 251 (251 is prime, so the pattern
// never lines up with frame or window boundaries).
func pattern(n int) []byte {
	b := make([]byte, n)
	for j := range b {
		b[j] = byte(j % 251)
	}
	return b
}

func runPeer(args []string) {
	fs := flag.NewFlagSet("peer", flag.ExitOnError)
	listenAddr := fs.String("listen", "", "accept one TCP connection here; be the yamux server")
	dialAddr := fs.String("dial", "", "dial this TCP address; be the yamux client")
	_ = fs.Parse(args)

	var sess *yamux.Session
	var err error
	switch {
	case *listenAddr != "" && *dialAddr == "":
		ln := listen(*listenAddr)
		conn, aerr := ln.Accept()
		if aerr != nil {
			fail("accept: %v", aerr)
		}
		ln.Close()
		sess, err = yamux.Server(conn, yamuxConfig(false))
	case *dialAddr != "" && *listenAddr == "":
		conn, derr := net.Dial("tcp", *dialAddr)
		if derr != nil {
			fail("dial %s: %v", *dialAddr, derr)
		}
		sess, err = yamux.Client(conn, yamuxConfig(false))
	default:
		fail("peer: exactly one of -listen, -dial")
	}
	if err != nil {
		fail("session: %v", err)
	}
	say("READY")

	go func() {
		<-sess.CloseChan()
		say("SESSION closed")
	}()
	go peerEcho(sess)

	lines := bufio.NewScanner(os.Stdin)
	for lines.Scan() {
		f := strings.Fields(lines.Text())
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "open":
			if len(f) != 3 {
				say("OPENED error usage: open COUNT SIZE")
				continue
			}
			count, _ := strconv.Atoi(f[1])
			size, _ := strconv.Atoi(f[2])
			go peerOpen(sess, count, size)
		case "ping":
			go func() {
				rtt, perr := sess.Ping()
				if perr != nil {
					say("PING error %v", perr)
				} else {
					say("PING ok %d", rtt.Nanoseconds())
				}
			}()
		case "open-check":
			s, oerr := sess.OpenStream()
			if oerr != nil {
				say("OPENCHECK refused %v", oerr)
			} else {
				say("OPENCHECK opened %d", s.StreamID())
				s.Close()
			}
		case "close":
			sess.Close()
			say("CLOSED")
		default:
			say("ERROR unknown command %q", f[0])
		}
	}
	sess.Close()
}

// peerEcho echoes every stream the other side opens until it half-closes, then closes ours.
func peerEcho(sess *yamux.Session) {
	for {
		s, err := sess.AcceptStream()
		if err != nil {
			say("ACCEPT ended %v", err)
			return
		}
		go func(s *yamux.Stream) {
			buf := make([]byte, 64<<10)
			n, err := io.CopyBuffer(s, s, buf)
			s.Close()
			if err != nil {
				say("ECHOED %d %d error %v", s.StreamID(), n, err)
			} else {
				say("ECHOED %d %d ok", s.StreamID(), n)
			}
		}(s)
	}
}

// peerOpen opens count streams at once. On each it sends an 8-byte big-endian length and that
// many pattern bytes, expects them echoed back, then expects EOF (the other side's FIN) before
// closing its own side.
func peerOpen(sess *yamux.Session, count, size int) {
	var wg sync.WaitGroup
	errs := make(chan error, count)
	for i := 0; i < count; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := peerOpenOne(sess, size); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err, bad := <-errs; bad {
		say("OPENED error %v", err)
		return
	}
	say("OPENED ok %d", count)
}

func peerOpenOne(sess *yamux.Session, size int) error {
	s, err := sess.OpenStream()
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	defer s.Close()
	want := pattern(size)
	werr := make(chan error, 1)
	go func() {
		var hdr [8]byte
		binary.BigEndian.PutUint64(hdr[:], uint64(size))
		if _, err := s.Write(hdr[:]); err != nil {
			werr <- err
			return
		}
		_, err := s.Write(want)
		werr <- err
	}()
	got := make([]byte, size)
	if _, err := io.ReadFull(s, got); err != nil {
		return fmt.Errorf("stream %d: reading echo: %w", s.StreamID(), err)
	}
	if err := <-werr; err != nil {
		return fmt.Errorf("stream %d: write: %w", s.StreamID(), err)
	}
	for j := range got {
		if got[j] != want[j] {
			return fmt.Errorf("stream %d: echo differs at byte %d", s.StreamID(), j)
		}
	}
	var one [1]byte
	n, err := s.Read(one[:])
	if n != 0 || !errors.Is(err, io.EOF) {
		return fmt.Errorf("stream %d: wanted EOF after the echo, got %d bytes, %v", s.StreamID(), n, err)
	}
	return nil
}

// ---- sink ------------------------------------------------------------------------------------

// The sink reads one command byte per connection:
//
//	'B'        bulk: write as fast as possible until the connection is closed or half-closed
//	any other  echo that byte once, then close (the far end closes first, so TIME_WAIT lands on
//	           listening sides and the load client never runs out of ephemeral ports)
func runSink(args []string) {
	fs := flag.NewFlagSet("sink", flag.ExitOnError)
	live := lifeline(fs)
	addr := fs.String("listen", "127.0.0.1:0", "listen address")
	_ = fs.Parse(args)
	watchLifeline(live)
	ln := listen(*addr)
	for {
		c, err := ln.Accept()
		if err != nil {
			fail("accept: %v", err)
		}
		go serveSink(c)
	}
}

func serveSink(c net.Conn) {
	defer c.Close()
	var cmd [1]byte
	if _, err := io.ReadFull(c, cmd[:]); err != nil {
		return
	}
	if cmd[0] != 'B' {
		_, _ = c.Write(cmd[:])
		return
	}
	var stop atomic.Bool
	go func() {
		_, _ = io.Copy(io.Discard, c)
		stop.Store(true)
	}()
	buf := make([]byte, ioBuffer)
	for !stop.Load() {
		if _, err := c.Write(buf); err != nil {
			return
		}
	}
}

// ---- load client -----------------------------------------------------------------------------

// The client reads commands on stdin and answers each with one JSON line:
//
//	bulk ADDR STREAMS WARMUP_S DURATION_S     receive from STREAMS sink connections at once;
//	                                          gbps counts bytes received in the measured window
//	opens ADDR CONCURRENCY WARMUP_S DURATION_S  CONCURRENCY workers loop: connect, 1-byte echo,
//	                                          wait for the far end's close, close
func runClient(args []string) {
	fs := flag.NewFlagSet("client", flag.ExitOnError)
	_ = fs.Parse(args)
	lines := bufio.NewScanner(os.Stdin)
	enc := json.NewEncoder(os.Stdout)
	for lines.Scan() {
		f := strings.Fields(lines.Text())
		if len(f) == 0 {
			continue
		}
		var res map[string]interface{}
		switch {
		case f[0] == "bulk" && len(f) == 5:
			n, _ := strconv.Atoi(f[2])
			res = bulk(f[1], n, seconds(f[3]), seconds(f[4]))
		case f[0] == "opens" && len(f) == 5:
			n, _ := strconv.Atoi(f[2])
			res = opens(f[1], n, seconds(f[3]), seconds(f[4]))
		default:
			res = map[string]interface{}{"error": "bad command: " + lines.Text()}
		}
		outMu.Lock()
		_ = enc.Encode(res)
		outMu.Unlock()
	}
}

func seconds(s string) time.Duration {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		fail("bad seconds %q", s)
	}
	return time.Duration(v * float64(time.Second))
}

func bulk(addr string, streams int, warmup, duration time.Duration) map[string]interface{} {
	var received atomic.Int64
	var failures atomic.Int64
	conns := make([]net.Conn, 0, streams)
	for i := 0; i < streams; i++ {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			for _, c := range conns {
				c.Close()
			}
			return map[string]interface{}{"error": err.Error()}
		}
		conns = append(conns, c)
	}
	var wg sync.WaitGroup
	var stopping atomic.Bool
	for _, c := range conns {
		wg.Add(1)
		go func(c net.Conn) {
			defer wg.Done()
			if _, err := c.Write([]byte{'B'}); err != nil {
				failures.Add(1)
				return
			}
			buf := make([]byte, ioBuffer)
			for {
				n, err := c.Read(buf)
				received.Add(int64(n))
				if err != nil {
					if !stopping.Load() {
						failures.Add(1)
					}
					return
				}
			}
		}(c)
	}
	time.Sleep(warmup)
	b0, t0 := received.Load(), time.Now()
	time.Sleep(duration)
	b1, t1 := received.Load(), time.Now()
	stopping.Store(true)
	for _, c := range conns {
		c.Close()
	}
	wg.Wait()
	secs := t1.Sub(t0).Seconds()
	res := map[string]interface{}{
		"gbps":    float64(b1-b0) * 8 / secs / 1e9,
		"bytes":   b1 - b0,
		"seconds": secs,
		"errors":  failures.Load(),
	}
	if b1 == b0 {
		res["error"] = "no bytes received in the measured window"
	}
	return res
}

func openOnce(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte{'e'}); err != nil {
		return err
	}
	var b [2]byte
	if _, err := io.ReadFull(c, b[:1]); err != nil {
		return err
	}
	if b[0] != 'e' {
		return fmt.Errorf("echo returned %q", b[0])
	}
	if n, err := c.Read(b[:]); n != 0 || !errors.Is(err, io.EOF) {
		return fmt.Errorf("wanted EOF after the echo, got %d bytes, %v", n, err)
	}
	return nil
}

func opens(addr string, workers int, warmup, duration time.Duration) map[string]interface{} {
	var done, failures atomic.Int64
	var lastErr atomic.Value
	start := time.Now()
	end := start.Add(warmup + duration)
	var wg sync.WaitGroup
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				if err := openOnce(addr); err != nil {
					failures.Add(1)
					lastErr.Store(err.Error())
					continue
				}
				done.Add(1)
			}
		}()
	}
	time.Sleep(warmup)
	n0, t0 := done.Load(), time.Now()
	time.Sleep(time.Until(end))
	n1, t1 := done.Load(), time.Now()
	wg.Wait()
	secs := t1.Sub(t0).Seconds()
	res := map[string]interface{}{
		"opens_per_s": float64(n1-n0) / secs,
		"opens":       n1 - n0,
		"seconds":     secs,
		"errors":      failures.Load(),
	}
	if e, ok := lastErr.Load().(string); ok {
		res["last_error"] = e
	}
	if n1 == n0 {
		res["error"] = "no open completed in the measured window"
	}
	return res
}

// ---- go_yamux tunnel shape -------------------------------------------------------------------

type closeWriter interface{ CloseWrite() error }

// halfClose ends our sending direction: CloseWrite on TCP, Close (FIN) on a yamux stream.
func halfClose(c net.Conn) {
	if cw, ok := c.(closeWriter); ok {
		_ = cw.CloseWrite()
		return
	}
	_ = c.Close()
}

// copyBuffers recycles splice's buffers: a fresh 1 MiB buffer per direction per stream
// would cost every short-lived stream two zeroed allocations.
var copyBuffers = sync.Pool{New: func() interface{} { return make([]byte, ioBuffer) }}

// splice copies both ways, propagating half-close, and closes both once both directions end.
// It copies ioBuffer (1 MiB) at a time, the read size of devyard.core.splice and of the
// trio_proxy path, so that every path moves data in pieces of the same size.
func splice(a, b net.Conn) {
	var wg sync.WaitGroup
	pump := func(dst, src net.Conn) {
		defer wg.Done()
		buf := copyBuffers.Get().([]byte)
		defer copyBuffers.Put(buf)
		_, _ = io.CopyBuffer(dst, src, buf)
		halfClose(dst)
	}
	wg.Add(2)
	go pump(a, b)
	go pump(b, a)
	wg.Wait()
	a.Close()
	b.Close()
}

func runEntry(args []string) {
	fs := flag.NewFlagSet("entry", flag.ExitOnError)
	live := lifeline(fs)
	addr := fs.String("listen", "127.0.0.1:0", "where load clients connect")
	carrier := fs.String("carrier", "", "the exit's carrier address")
	_ = fs.Parse(args)
	watchLifeline(live)
	conn, err := net.Dial("tcp", *carrier)
	if err != nil {
		fail("dial carrier %s: %v", *carrier, err)
	}
	sess, err := yamux.Client(conn, tunnelConfig())
	if err != nil {
		fail("session: %v", err)
	}
	go func() {
		<-sess.CloseChan()
		fail("carrier session closed")
	}()
	ln := listen(*addr)
	for {
		c, err := ln.Accept()
		if err != nil {
			fail("accept: %v", err)
		}
		go func(c net.Conn) {
			s, err := sess.OpenStream()
			if err != nil {
				c.Close()
				return
			}
			splice(c, s)
		}(c)
	}
}

func runExit(args []string) {
	fs := flag.NewFlagSet("exit", flag.ExitOnError)
	live := lifeline(fs)
	addr := fs.String("listen", "127.0.0.1:0", "where the entry's carrier connects")
	sink := fs.String("sink", "", "the address every stream is dialed to")
	_ = fs.Parse(args)
	watchLifeline(live)
	ln := listen(*addr)
	conn, err := ln.Accept()
	if err != nil {
		fail("accept: %v", err)
	}
	ln.Close()
	sess, err := yamux.Server(conn, tunnelConfig())
	if err != nil {
		fail("session: %v", err)
	}
	for {
		s, err := sess.AcceptStream()
		if err != nil {
			fail("carrier session ended: %v", err)
		}
		go func(s *yamux.Stream) {
			c, err := net.Dial("tcp", *sink)
			if err != nil {
				s.Close()
				return
			}
			splice(s, c)
		}(s)
	}
}

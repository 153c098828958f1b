// Peer for bench/hub/peers.py: a gorilla/websocket broadcast server, the floor of a compiled
// server. It answers every client's hub handshake with "{}\x1e" and, on each stdin line
// {"pushes": n}, sends n invocation records (the same JSON hub record bytes as the hub), 8 per
// batch, yielding to the other goroutines after each, to every client that connected with
// ?member=1. Each connection has one writer goroutine fed by a channel: with -joined a batch's
// 8 records go in one frame, otherwise each record is a frame of its own. Prints
// {"event": "listening"} once the port is open.
//
//	go_ws [-joined] PORT CHAT
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"

	"github.com/gorilla/websocket"
)

type member struct{ out chan []byte }

var (
	lock    sync.Mutex
	members = map[*member]struct{}{}
)

func serve(w http.ResponseWriter, r *http.Request) {
	upgrader := websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}
	conn, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	defer conn.Close()
	if _, _, err := conn.ReadMessage(); err != nil { // the hub handshake
		return
	}
	if err := conn.WriteMessage(websocket.TextMessage, []byte("{}\x1e")); err != nil {
		return
	}
	m := &member{out: make(chan []byte, 256)}
	done := make(chan struct{})
	go func() { // the connection's writer
		defer close(done)
		failed := false
		for data := range m.out { // drained to the end, so that a push never waits on it
			if !failed {
				failed = conn.WriteMessage(websocket.TextMessage, data) != nil
			}
		}
	}()
	if strings.Contains(r.URL.RawQuery, "member=1") {
		lock.Lock()
		members[m] = struct{}{}
		lock.Unlock()
	}
	for { // pings and anything else the client sends, until it goes
		if _, _, err := conn.ReadMessage(); err != nil {
			break
		}
	}
	lock.Lock()
	delete(members, m)
	lock.Unlock()
	close(m.out)
	<-done
}

func main() {
	joined := flag.Bool("joined", false, "a batch's records in one frame")
	flag.Parse()
	port, chat := flag.Arg(0), flag.Arg(1)
	listener, err := net.Listen("tcp", "127.0.0.1:"+port)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	go http.Serve(listener, http.HandlerFunc(serve))
	fmt.Println(`{"event": "listening"}`)
	lines := bufio.NewScanner(os.Stdin)
	for lines.Scan() {
		var command struct{ Pushes int }
		if err := json.Unmarshal(lines.Bytes(), &command); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		for start := 0; start < command.Pushes; start += 8 {
			var batch [][]byte
			for n := start; n < start+8 && n < command.Pushes; n++ {
				record := fmt.Sprintf(
					`{"type":1,"target":"message_received","arguments":[{"chatId":"%s","seq":%d}]}`+"\x1e",
					chat, n)
				batch = append(batch, []byte(record))
			}
			if *joined {
				batch = [][]byte{bytes.Join(batch, nil)}
			}
			lock.Lock()
			for m := range members {
				for _, data := range batch {
					m.out <- data
				}
			}
			lock.Unlock()
			runtime.Gosched() // a batch, then the other goroutines' turn
		}
	}
}

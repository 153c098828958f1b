// Peer for bench/hub_peers.py: a Centrifuge node (memory broker, the library's JSON protocol on
// its WebSocket handler at /connection/websocket). Every client is let in (anonymous
// credentials) and may subscribe to "chat"; the clients process subscribes the members only.
// On each stdin line {"pushes": n} it publishes n records to "chat" with node.Publish, 8 per
// batch, each record's data the same JSON hub record as the hub's (without the record
// separator). Prints {"event": "listening"} once the port is open.
//
//	go-centrifuge PORT CHAT
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"runtime"

	"github.com/centrifugal/centrifuge"
)

func main() {
	port, chat := os.Args[1], os.Args[2]
	node, err := centrifuge.New(centrifuge.DefaultConfig)
	if err != nil {
		fail(err)
	}
	node.OnConnecting(func(context.Context, centrifuge.ConnectEvent) (centrifuge.ConnectReply, error) {
		return centrifuge.ConnectReply{Credentials: &centrifuge.Credentials{}}, nil
	})
	node.OnConnect(func(client *centrifuge.Client) {
		client.OnSubscribe(func(_ centrifuge.SubscribeEvent, reply centrifuge.SubscribeCallback) {
			reply(centrifuge.SubscribeReply{}, nil)
		})
	})
	if err := node.Run(); err != nil {
		fail(err)
	}
	listener, err := net.Listen("tcp", "127.0.0.1:"+port)
	if err != nil {
		fail(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/connection/websocket", centrifuge.NewWebsocketHandler(node, centrifuge.WebsocketConfig{}))
	go http.Serve(listener, mux)
	fmt.Println(`{"event": "listening"}`)
	lines := bufio.NewScanner(os.Stdin)
	for lines.Scan() {
		var command struct{ Pushes int }
		if err := json.Unmarshal(lines.Bytes(), &command); err != nil {
			fail(err)
		}
		for n := 0; n < command.Pushes; n++ {
			record := fmt.Sprintf(
				`{"type":1,"target":"message_received","arguments":[{"chatId":"%s","seq":%d}]}`,
				chat, n)
			if _, err := node.Publish("chat", []byte(record)); err != nil {
				fail(err)
			}
			if n%8 == 7 { // a batch's pushes, then the other goroutines' turn
				runtime.Gosched()
			}
		}
	}
	_ = node.Shutdown(context.Background())
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}

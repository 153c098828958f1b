// Peer for bench/hub/peers.py and bench/hub/capacity.py: a Centrifuge node (memory broker, the
// library's JSON protocol on its WebSocket handler at /connection/websocket). A client may
// subscribe to any channel; the clients subscribe to theirs.
//
//	go_centrifuge PORT CHAT
//
// bench/hub/peers.py: every client is let in (anonymous credentials); on each stdin line
// {"pushes": n} it publishes n records to "chat" with node.Publish, 8 per batch (then the other
// goroutines' turn), each record's data the same JSON hub record as the hub's (without the
// record separator).
//
//	go_centrifuge -secret S -service-key K PORT
//
// bench/hub/capacity.py: a client is let in with an HS256 token (the hub's) in its connect
// command, as user "sub"; POST /api/v1/hubs/messenger/batch with "Authorization: Bearer K" and
// the worker publisher's body publishes each push's hub record to the channel named by its
// group and answers every push accepted; GET /readyz answers 200.
//
// Both print {"event": "listening"} once the port is open.
package main

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/centrifugal/centrifuge"
)

func main() {
	secret := flag.String("secret", "", "HS256 secret of the clients' tokens (capacity mode)")
	serviceKey := flag.String("service-key", "", "the batch endpoint's bearer key (capacity mode)")
	flag.Parse()
	node, err := centrifuge.New(centrifuge.DefaultConfig)
	if err != nil {
		fail(err)
	}
	node.OnConnecting(func(_ context.Context, e centrifuge.ConnectEvent) (centrifuge.ConnectReply, error) {
		if *secret == "" {
			return centrifuge.ConnectReply{Credentials: &centrifuge.Credentials{}}, nil
		}
		user, err := verify(e.Token, []byte(*secret))
		if err != nil {
			return centrifuge.ConnectReply{}, centrifuge.DisconnectInvalidToken
		}
		return centrifuge.ConnectReply{Credentials: &centrifuge.Credentials{UserID: user}}, nil
	})
	node.OnConnect(func(client *centrifuge.Client) {
		client.OnSubscribe(func(_ centrifuge.SubscribeEvent, reply centrifuge.SubscribeCallback) {
			reply(centrifuge.SubscribeReply{}, nil)
		})
	})
	if err := node.Run(); err != nil {
		fail(err)
	}
	listener, err := net.Listen("tcp", "127.0.0.1:"+flag.Arg(0))
	if err != nil {
		fail(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/connection/websocket", centrifuge.NewWebsocketHandler(node, centrifuge.WebsocketConfig{}))
	if *serviceKey != "" {
		mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok")) })
		mux.HandleFunc("/api/v1/hubs/messenger/batch", batch(node, "Bearer "+*serviceKey))
	}
	go http.Serve(listener, mux)
	fmt.Println(`{"event": "listening"}`)
	if *serviceKey != "" { // pushed to over HTTP until stopped
		stop := make(chan os.Signal, 1)
		signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
		<-stop
		_ = node.Shutdown(context.Background())
		return
	}
	chat := flag.Arg(1)
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
			if n%8 == 7 {
				runtime.Gosched()
			}
		}
	}
	_ = node.Shutdown(context.Background())
}

// batch publishes each push of a worker publisher's batch body to its group's channel, its data
// the hub's invocation record of the push.
func batch(node *centrifuge.Node, authorization string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != authorization {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		var body struct {
			Pushes []struct {
				Group     string          `json:"group"`
				Target    string          `json:"target"`
				Arguments json.RawMessage `json:"arguments"`
			} `json:"pushes"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		results := make([]string, len(body.Pushes))
		for i, push := range body.Pushes {
			record, _ := json.Marshal(map[string]interface{}{
				"type": 1, "target": push.Target, "arguments": push.Arguments,
			})
			if _, err := node.Publish(push.Group, record); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			results[i] = `{"status":202}`
		}
		answer := `{"results":[` + strings.Join(results, ",") + `]}`
		w.Header().Set("Content-Type", "application/json")
		// a length, not chunks, whatever its size: as the hub answers
		w.Header().Set("Content-Length", strconv.Itoa(len(answer)))
		w.Write([]byte(answer))
	}
}

// verify checks an HS256 JWT against secret and its expiry, and returns its subject.
func verify(token string, secret []byte) (string, error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return "", errors.New("malformed token")
	}
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(parts[0] + "." + parts[1]))
	signature, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil || !hmac.Equal(signature, mac.Sum(nil)) {
		return "", errors.New("bad signature")
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return "", err
	}
	var claims struct {
		Sub string
		Exp int64
	}
	if err := json.Unmarshal(payload, &claims); err != nil || claims.Sub == "" {
		return "", errors.New("bad claims")
	}
	if claims.Exp != 0 && claims.Exp < time.Now().Unix() {
		return "", errors.New("expired")
	}
	return claims.Sub, nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}

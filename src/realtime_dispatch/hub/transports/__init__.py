"""SignalR's HTTP transports beside the WebSocket: Server-Sent Events and long polling."""

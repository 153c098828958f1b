"""The hub: CPU per frame against its floors and its peers (Go, Node, Centrifuge, socket.io),
capacity and memory per connection, signals, presence, revocation, the backplanes and the batch
endpoint."""

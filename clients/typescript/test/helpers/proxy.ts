// A loopback TCP relay between a client and the runtime that a test can cut, to cause a real
// disconnect: `cut()` destroys every open connection; while `blocked`, new ones are refused
// (closed at once), so a reconnecting client keeps failing until `blocked` is cleared.

import { type AddressInfo, type Server, type Socket, createConnection, createServer } from "node:net";

export class Relay {
  blocked = false;
  /** Connections accepted so far (refused ones included). */
  accepted = 0;
  private readonly server: Server;
  private readonly sockets = new Set<Socket>();

  private constructor(upstream: { host: string; port: number }) {
    this.server = createServer((client) => {
      this.accepted += 1;
      if (this.blocked) {
        client.destroy();
        return;
      }
      const server = createConnection(upstream);
      for (const socket of [client, server]) {
        this.sockets.add(socket);
        socket.on("close", () => this.sockets.delete(socket));
        socket.on("error", () => undefined); // a cut is expected; both ends are destroyed below
      }
      client.pipe(server);
      server.pipe(client);
      client.on("close", () => server.destroy());
      server.on("close", () => client.destroy());
    });
  }

  /** Listens on a free loopback port in front of `address` (host:port). */
  static async start(address: string): Promise<Relay> {
    const at = address.lastIndexOf(":");
    const relay = new Relay({ host: address.slice(0, at), port: Number(address.slice(at + 1)) });
    await new Promise<void>((done) => relay.server.listen(0, "127.0.0.1", done));
    return relay;
  }

  get address(): string {
    return `127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  /**
   * Drops every relayed connection, both directions: "close" ends the client's socket (FIN),
   * "reset" aborts it (TCP RST, the client reads ECONNRESET).
   */
  cut(how: "close" | "reset" = "close"): void {
    for (const socket of this.sockets) {
      if (how === "reset") socket.resetAndDestroy();
      else socket.destroy();
    }
  }

  async close(): Promise<void> {
    this.cut();
    await new Promise<void>((done) => this.server.close(() => done()));
  }
}

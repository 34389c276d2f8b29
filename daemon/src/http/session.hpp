#pragma once

// A session: one accepted connection, plain TCP or TLS, from handshake to close. It reads requests
// (request_reader.hpp), hands each GET/HEAD to the handler and writes the response
// (outgoing_response.hpp), one exchange at a time, and registers itself with the accept loop for its
// lifetime so that eviction and stop() can reach it. Internal to rankstat_http; io thread only.

#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <memory>

namespace boost::asio::ssl {
class context;
}  // namespace boost::asio::ssl

namespace rankstat::http::detail {

class ServerCore;

// Starts serving `socket`: over TLS with `tls` (the handshake first, under the header deadline), or plain
// HTTP when `tls` is null. `peer` is what max_connections_per_peer counts. The session owns itself
// through its pending operations.
void start_session(std::shared_ptr<ServerCore> server, boost::asio::ip::tcp::socket socket,
                   boost::asio::ip::address peer, std::shared_ptr<boost::asio::ssl::context> tls);

}  // namespace rankstat::http::detail

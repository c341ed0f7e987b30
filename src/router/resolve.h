// Name resolution with a time limit, for the router's request path, health checks and DNS
// discovery. getaddrinfo cannot be interrupted: a lookup that outlives its limit is left to finish
// on Asio's resolver thread, and the caller gets its error at once. An IP address is taken as it
// is, without the resolver, so replicas named by address never wait behind a slow lookup.
//
// REQUIRES: called from a coroutine whose executor runs one handler at a time (a strand, or an
// io_context run by one thread).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "common/status.h"

namespace sluice::router {

boost::asio::awaitable<Result<std::vector<boost::asio::ip::tcp::endpoint>>> resolve(std::string host, uint16_t port,
                                                                                    std::chrono::milliseconds limit);

}  // namespace sluice::router

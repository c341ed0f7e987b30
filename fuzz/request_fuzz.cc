// Fuzz target: any bytes a client may send, through the server's request path short of the
// engine: Beast's HTTP parser (with the server's limits), then the JSON body and every
// request parser. Each yields a value or an error — never a crash, a hang or a bad read.
// The same bytes also go to the body parsers directly, so that mutations of JSON are not
// all spent breaking the HTTP framing (Content-Length) around it.
#include <cstddef>
#include <algorithm>
#include <cstdint>

#include <boost/beast/http.hpp>

#include "server/openai_protocol.h"

#include "fuzz/request_fuzz.h"

int sluice_fuzz_request(const uint8_t* data, size_t size) {
  namespace http = boost::beast::http;
  using namespace sluice::server;
  http::request_parser<http::string_body> parser;
  parser.body_limit(1 << 20);
  parser.header_limit(64 << 10);
  boost::beast::error_code ec;
  // Delivered 97 bytes at a time, as a socket would; the parser sees what it has not consumed.
  const char* bytes = reinterpret_cast<const char*>(data);
  size_t consumed = 0, arrived = std::min<size_t>(size, 97);
  while (!parser.is_done() && consumed < size) {
    const size_t n = parser.put(boost::asio::buffer(bytes + consumed, arrived - consumed), ec);
    consumed += n;
    if (ec && ec != http::error::need_more) return 0;
    if (n == 0) {  // the parser wants more than has arrived
      if (arrived == size) break;  // the input ends inside the message
      ec = {};
      arrived = std::min(size, arrived + 97);
    }
  }
  if (!parser.is_done()) return 0;
  const std::string& body = parser.get().body();
  return 1 + sluice_fuzz_body(reinterpret_cast<const uint8_t*>(body.data()), body.size());
}

int sluice_fuzz_body(const uint8_t* data, size_t size) {
  using namespace sluice::server;
  auto body = parse_body(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!body) return 0;
  (void)parse_completion_request(*body);
  (void)parse_chat_request(*body);
  (void)parse_tokenize_request(*body);
  (void)parse_detokenize_request(*body);
  return 1;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)sluice_fuzz_request(data, size);
  (void)sluice_fuzz_body(data, size);
  return 0;
}

// Text into HTML or XML (SVG): the five characters markup gives meaning to, as entities. For the
// pages and charts the project draws (the router's dashboard, bench's SVG), where every text
// from outside (model outputs, URLs, reasons) goes through it.
#pragma once

#include <string>
#include <string_view>

namespace sluice {

inline std::string html_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace sluice

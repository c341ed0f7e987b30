// The compiled part of Boost.Asio and Boost.Beast, once for the whole program. Every file
// that includes them is built with BOOST_ASIO_SEPARATE_COMPILATION and
// BOOST_BEAST_SEPARATE_COMPILATION (sluice_common's public definitions), so it declares what
// this file defines instead of compiling it again.
#include <boost/asio/impl/src.hpp>
#include <boost/asio/ssl/impl/src.hpp>
#include <boost/beast/src.hpp>

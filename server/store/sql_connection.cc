#include "server/store/sql_connection.h"

#include <cstdlib>

namespace headroom {

SqlParams& SqlParams::Int(int64_t value) {
  values_.push_back({SqlValue::Kind::kInt, value, {}});
  return *this;
}

SqlParams& SqlParams::Text(std::string value) {
  values_.push_back({SqlValue::Kind::kText, 0, std::move(value)});
  return *this;
}

SqlParams& SqlParams::Bytes(std::string value) {
  values_.push_back({SqlValue::Kind::kBytes, 0, std::move(value)});
  return *this;
}

SqlParams& SqlParams::Null() {
  values_.push_back({});
  return *this;
}

bool SqlRows::IsNull(int row, int column) const {
  return rows_[row][column].kind == SqlValue::Kind::kNull;
}

int64_t SqlRows::Int(int row, int column) const {
  const SqlValue& value = rows_[row][column];
  if (value.kind == SqlValue::Kind::kInt) return value.integer;
  if (value.kind == SqlValue::Kind::kNull) return 0;
  return std::strtoll(value.bytes.c_str(), nullptr, 10);
}

const std::string& SqlRows::Bytes(int row, int column) const {
  return rows_[row][column].bytes;
}

std::vector<SqlValue>& SqlRows::AddRow() { return rows_.emplace_back(); }

}  // namespace headroom

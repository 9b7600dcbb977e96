#ifndef HEADROOM_SERVER_STORE_LEGACY_MIGRATIONS_H_
#define HEADROOM_SERVER_STORE_LEGACY_MIGRATIONS_H_

// The schema histories the two stores had before they became one SqlStore,
// frozen as shipped: databases written then (and new ones, which replay
// them) reach the last of these versions first, then SqlStore's own
// migrations, written once, bring both backends to the same schema.
// Migration i brings a database to version i+1.

namespace headroom {

inline constexpr int kLegacySqliteVersion = 9;
inline constexpr int kLegacyPostgresVersion = 4;

extern const char* const kLegacySqliteMigrations[kLegacySqliteVersion];
extern const char* const kLegacyPostgresMigrations[kLegacyPostgresVersion];

}  // namespace headroom

#endif  // HEADROOM_SERVER_STORE_LEGACY_MIGRATIONS_H_

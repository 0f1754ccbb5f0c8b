// swift-tools-version:6.2
import PackageDescription

let swiftSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("MemberImportVisibility"),
]

/// Tests import less precisely than library code; member-import checking stays on for the sources.
let testSwiftSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
]

let package = Package(
    name: "nimbus",
    platforms: [.macOS(.v14), .iOS(.v17)],
    products: [
        .executable(name: "nimbus", targets: ["nimbus"]),
        .executable(name: "nimbus-bench", targets: ["nimbus-bench"]),
        .library(name: "NimbusAPI", targets: ["NimbusAPI"]),
        .library(name: "NimbusServer", targets: ["NimbusServer"]),
        .library(name: "NimbusSync", targets: ["NimbusSync"]),
        .library(name: "NimbusS3", targets: ["NimbusS3"]),
    ],
    dependencies: [
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1"),
        .package(url: "https://github.com/hummingbird-project/hummingbird-auth.git", from: "2.5.0"),
        .package(url: "https://github.com/hummingbird-project/hummingbird-websocket.git", from: "2.8.1"),
        .package(url: "https://github.com/groue/GRDB.swift.git", from: "7.10.0"),
        .package(url: "https://github.com/apple/swift-crypto.git", from: "4.5.2"),
        .package(url: "https://github.com/vapor/jwt-kit.git", from: "5.8.0"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
        .package(url: "https://github.com/apple/swift-http-types.git", from: "1.8.0"),
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/vapor/postgres-nio.git", from: "1.33.2"),
        .package(url: "https://github.com/adam-fowler/compress-nio.git", from: "1.5.0"),
        // `swift package generate-documentation --target NimbusSync`: the library's DocC catalog.
        .package(url: "https://github.com/swiftlang/swift-docc-plugin.git", from: "1.5.0"),
    ],
    targets: [
        .target(
            name: "NimbusAPI",
            swiftSettings: swiftSettings
        ),
        .target(
            name: "NimbusServer",
            dependencies: [
                "NimbusAPI",
                "NimbusS3",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdBcrypt", package: "hummingbird-auth"),
                .product(name: "HummingbirdWebSocket", package: "hummingbird-websocket"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
                .product(name: "CompressNIO", package: "compress-nio"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "NimbusS3",
            dependencies: [
                "NimbusAPI",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOFoundationCompat", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "NimbusS3Tests",
            dependencies: [
                "NimbusS3", "NimbusTestSupport", .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "Hummingbird", package: "hummingbird"), .product(name: "HummingbirdTesting", package: "hummingbird"),
            ],
            swiftSettings: testSwiftSettings
        ),
        .target(
            name: "NimbusSync",
            dependencies: [
                "NimbusAPI",
                "NimbusS3",
                .product(name: "CompressNIO", package: "compress-nio"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "GRDBSQLite", package: "GRDB.swift"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOFoundationCompat", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "nimbus",
            dependencies: [
                "NimbusAPI",
                "NimbusServer",
                "NimbusSync",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "nimbus-bench",
            dependencies: [
                "NimbusAPI", "NimbusSync", .product(name: "GRDB", package: "GRDB.swift"), .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Hummingbird", package: "hummingbird"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "NimbusSyncTests",
            dependencies: [
                "NimbusAPI",
                "NimbusSync",
                "NimbusServer",
                "NimbusTestSupport",
                "NimbusSyncTestSupport",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOFoundationCompat", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "CompressNIO", package: "compress-nio"),
            ],
            swiftSettings: testSwiftSettings
        ),
        .target(
            name: "NimbusTestSupport",
            dependencies: [.product(name: "NIOConcurrencyHelpers", package: "swift-nio")],
            path: "Tests/NimbusTestSupport",
            swiftSettings: testSwiftSettings
        ),
        .target(
            name: "NimbusSyncTestSupport",
            dependencies: [
                "NimbusAPI", "NimbusSync", .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            path: "Tests/NimbusSyncTestSupport",
            swiftSettings: testSwiftSettings
        ),
        .testTarget(
            name: "ProviderConformance",
            dependencies: [
                "NimbusAPI",
                "NimbusSync",
                "NimbusS3",
                "NimbusTestSupport",
                "NimbusSyncTestSupport",
                "NimbusServer",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "CompressNIO", package: "compress-nio"),
            ],
            swiftSettings: testSwiftSettings
        ),
        .testTarget(
            name: "EndToEndTests",
            dependencies: [
                "NimbusAPI", "NimbusSync", "NimbusS3", "NimbusTestSupport", .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
            ],
            swiftSettings: testSwiftSettings
        ),
        .testTarget(
            name: "NimbusAPITests",
            dependencies: ["NimbusAPI"],
            swiftSettings: testSwiftSettings
        ),
        .testTarget(
            name: "NimbusServerTests",
            dependencies: [
                "NimbusAPI",
                "NimbusServer",
                "NimbusS3",
                "NimbusTestSupport",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "HummingbirdWSClient", package: "hummingbird-websocket"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "CompressNIO", package: "compress-nio"),
            ],
            swiftSettings: testSwiftSettings
        ),
    ]
)

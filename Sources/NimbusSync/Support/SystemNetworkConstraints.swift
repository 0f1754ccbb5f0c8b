import Foundation

/// The network and battery as this machine tells them: `NIMBUS_NETWORK_METERED=1|0` and `NIMBUS_LOW_BATTERY=1|0`
/// force them (for scripts and tests); else, on Linux, NetworkManager's `Metered` property (over D-Bus, by `busctl`:
/// yes or guess-yes is metered) and the batteries in `/sys/class/power_supply` (discharging at 10 % or less is low).
/// Where neither is there (a server, a container), the network is taken as not metered. An app on Apple platforms
/// implements ``NetworkConstraintsProvider`` with `NWPathMonitor` and `ProcessInfo` instead.
public struct SystemNetworkConstraints: NetworkConstraintsProvider {
    public init() {}

    public func current() async -> NetworkConstraints {
        let environment = ProcessInfo.processInfo.environment
        var constraints = NetworkConstraints()
        if let forced = environment["NIMBUS_NETWORK_METERED"], forced == "1" || forced == "0" {
            constraints.isMetered = forced == "1"
            constraints.source = "NIMBUS_NETWORK_METERED"
        } else if let metered = Self.networkManagerMetered() {
            constraints.isMetered = metered
            constraints.source = "NetworkManager"
        }
        if let forced = environment["NIMBUS_LOW_BATTERY"], forced == "1" || forced == "0" {
            constraints.isLowBattery = forced == "1"
        } else {
            constraints.isLowBattery = Self.batteryIsLow()
        }
        return constraints
    }

    /// NetworkManager's `Metered` (NMMetered: 1 yes, 2 no, 3 guess-yes, 4 guess-no; 0 unknown); nil without it.
    static func networkManagerMetered() -> Bool? {
        let busctl = ["/usr/bin/busctl", "/bin/busctl"].first { FileManager.default.isExecutableFile(atPath: $0) }
        guard let busctl else { return nil }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: busctl)
        process.arguments = [
            "--system", "--timeout=2", "get-property", "org.freedesktop.NetworkManager", "/org/freedesktop/NetworkManager",
            "org.freedesktop.NetworkManager", "Metered",
        ]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        guard (try? process.run()) != nil else { return nil }
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else { return nil }
        let fields = String(decoding: data, as: UTF8.self).split(separator: " ")
        guard fields.count == 2, let value = Int(fields[1].trimmingCharacters(in: .whitespacesAndNewlines)), value != 0 else { return nil }
        return value == 1 || value == 3
    }

    static func batteryIsLow() -> Bool {
        let base = "/sys/class/power_supply"
        guard let supplies = try? FileManager.default.contentsOfDirectory(atPath: base) else { return false }
        for supply in supplies where supply.hasPrefix("BAT") {
            func read(_ name: String) -> String? {
                (try? String(contentsOfFile: "\(base)/\(supply)/\(name)", encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines)
            }
            if read("status") == "Discharging", let capacity = read("capacity").flatMap(Int.init), capacity <= 10 { return true }
        }
        return false
    }
}

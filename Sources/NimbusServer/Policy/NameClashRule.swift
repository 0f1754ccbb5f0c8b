import Foundation
import NimbusAPI

/// What happens when a new item, or an item renamed or moved, would take a name a live item of the folder already
/// has. Names are unique among a folder's live items (case-sensitive, NFC); trashed items hold no name.
enum NameClashRule {
    /// How a clash is settled.
    enum Outcome {
        /// The name is free (or held by the item itself).
        case free
        /// Take `name (1).ext`, `name (2).ext`, … instead.
        case renamed
        /// Write a new version of the file holding the name (an upload with `replace`).
        case replace(FileRecord)
    }

    /// The outcome for `name` in a folder where `existing` holds it (nil: nobody), for a new item that is a folder or
    /// not (`isFolder`), under `policy`; throws 409 `name_conflict` naming the holder when the clash stands. `itself`:
    /// the id of the item being renamed or moved (its own name is no clash).
    static func resolve(
        _ name: String, held existing: FileRecord?, policy: ConflictPolicy, isFolder: Bool, itself: String? = nil
    ) throws -> Outcome {
        guard let existing, existing.id != itself else { return .free }
        switch policy {
        case .fail:
            throw DriveError.nameConflict(name: name, existingId: existing.id)
        case .rename:
            return .renamed
        case .replace:
            // Only a file replaces a file: a folder is never written over, nor written over a file; nor is a share
            // someone else owns, mounted under this name.
            guard !isFolder, !existing.isFolder, !existing.isTrashed, existing.mountId == nil else { throw DriveError.nameConflict(name: name, existingId: existing.id) }
            return .replace(existing)
        }
    }

    /// `name (1).ext`, `name (2).ext`, …: the first candidate `isTaken` says is free (``FileName/numbered(_:_:)``).
    static func freeName(for name: String, isTaken: (String) throws -> Bool) throws -> String {
        var number = 1
        while try isTaken(FileName.numbered(name, number)) { number += 1 }
        return FileName.numbered(name, number)
    }
}
